// speedtier dashboard: live tables, local times, confirmations. No framework, no build.
(function () {
  "use strict";

  function localTimes(root) {
    root.querySelectorAll("time[data-epoch]").forEach(function (el) {
      var date = new Date(parseFloat(el.dataset.epoch) * 1000);
      el.textContent = date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
    });
  }

  function refresh(el) {
    var every = parseInt(el.dataset.every || "5000", 10);
    function tick() {
      if (document.hidden) { return setTimeout(tick, every); }
      fetch(el.dataset.refresh, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.classList.remove("stale");
          localTimes(el);
        })
        .catch(function () { el.classList.add("stale"); })
        .finally(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    document.querySelectorAll("[data-refresh]").forEach(refresh);
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
      });
    });
  });
})();
