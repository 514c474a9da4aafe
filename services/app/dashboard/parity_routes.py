"""The Parity page: each product's shadow runs of the bake window and their divergences
(``parity``), ``?product=`` for one product."""

from __future__ import annotations

from flask import request
from flask.typing import ResponseReturnValue

from services.app.dashboard.parity import BAKE_WINDOW, parity_view
from services.app.dashboard.web import PageProblem, blueprint, page, platform


@blueprint.get("/parity")
def parity() -> ResponseReturnValue:
    product = request.args.get("product", "").strip() or None
    if product is not None and product not in platform().parity_sources:
        raise PageProblem(400, "No such product", "No product reports shadow runs by that name.")
    view = parity_view(platform(), product=product)
    return page(
        "parity.html", view=view, product=product, hours=int(BAKE_WINDOW.total_seconds() // 3600)
    )
