"""One crawl_url unit: fetch a claimed URL (or replay it), store it, claim its children.

The caller's contract (the crawl_url job):

1. Open a session, call :func:`crawl_url_step` with ``final_attempt`` True on the job's
   last attempt. The step commits nothing: ``store_page``, the claims and the finish are
   all in the caller's transaction.
2. When it returns, **commit first, then enqueue** ``result.children`` (every one, every
   time: a replay re-emits the same requests, and their job ids are deterministic). If the
   enqueue fails the job fails and its retry replays the finished URL's children from the
   ledger without fetching again.
3. When it raises (``Retryable`` or an unexpected error on a non-final attempt, ``Delay``
   at any attempt, ``RecordMissing``), roll back: nothing was written that must survive.
4. ``result.failure`` is the error that finished the URL without content (a 4xx or
   another ``Unrecoverable``, or the final attempt's retryable failure). It is already
   counted in the ledger; after committing and enqueueing, the caller may re-raise it so
   the job records the failure. A robots.txt refusal finishes the URL with no failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.knowledge_sync import crawl_ledger
from services.knowledge_sync.crawl_ledger import ChildRequest
from services.web.fetch import CrawledPage
from services.web.robots import Disallowed
from shared.egress.addresses import AddressRefused, log_refusal
from shared.errors import Delay, RecordMissing, Unrecoverable


@dataclass(frozen=True)
class CrawlStepResult:
    """What one crawl_url run did.

    Attributes:
      children: follow-ups to enqueue after commit (all children this URL claimed).
      finished: True when this run finished the URL (and counted it down).
      page: the fetched page; None for a replay or a URL finished without content.
      replayed: the URL was finished already; nothing was fetched or counted.
      error: why the URL finished without content, as recorded on the task.
      failure: the exception behind ``error``, for the caller to re-raise after commit.
    """

    children: list[ChildRequest]
    finished: bool
    page: CrawledPage | None
    replayed: bool = False
    error: str | None = None
    failure: Exception | None = None


def _finish_without_page(
    session: Session,
    organization_id: int,
    crawl_task_id: int,
    url: str,
    error: str,
    failure: Exception | None,
) -> CrawlStepResult:
    finished = crawl_ledger.finish(
        session, organization_id=organization_id, crawl_task_id=crawl_task_id, url=url, error=error
    )
    return CrawlStepResult([], finished, None, error=error, failure=failure)


def _fetch_and_store(
    session: Session,
    org: int,
    task: int,
    url: str,
    fetch: Callable[[str], CrawledPage],
    final_attempt: bool,
    store_page: Callable[[CrawledPage], object],
    delay_ends_job: Callable[[Delay], bool] = lambda _delay: False,
) -> CrawledPage | CrawlStepResult:
    """The fetched page, stored in a savepoint; or, when the fetch or the store failed for
    good, the result of finishing the URL without it."""
    try:
        page = fetch(url)
        with session.begin_nested():
            store_page(page)
    except Delay as delay:
        if not delay_ends_job(delay):
            raise
        error = f"gave up: the host kept asking to wait ({delay.reason})"
        return _finish_without_page(session, org, task, url, error, None)
    except RecordMissing:
        raise
    except Disallowed as exc:
        return _finish_without_page(session, org, task, url, str(exc), None)
    except AddressRefused as exc:
        log_refusal(exc, organization_id=org, requested=url)
        return _finish_without_page(session, org, task, url, exc.reason, exc)
    except Unrecoverable as exc:
        return _finish_without_page(session, org, task, url, str(exc), exc)
    except Exception as exc:
        if not final_attempt:
            raise
        error = f"gave up on the final attempt: {type(exc).__name__}: {exc}"
        return _finish_without_page(session, org, task, url, error, exc)
    return page


def crawl_url_step(
    session: Session,
    *,
    organization_id: int,
    crawl_task_id: int,
    url: str,
    depth: int,
    fetch: Callable[[str], CrawledPage],
    final_attempt: bool,
    store_page: Callable[[CrawledPage], object],
    delay_ends_job: Callable[[Delay], bool] = lambda _delay: False,
) -> CrawlStepResult:
    """Run one crawl_url unit in the caller's transaction (see the module docstring).

    Parameters:
      url: as claimed in the ledger (``ChildRequest.url``).
      depth: the request's depth; the ledger's recorded depth is the one used.
      fetch: fetches a page, raising ``Disallowed``, ``Delay`` or the error hierarchy.
      final_attempt: True on the job's last attempt: a retryable failure then finishes
        the URL instead of being raised, so the crawl can still complete.
      store_page: writes the page's knowledge_base_documents row in this transaction; it
        runs in a savepoint, and a failure counts as a retryable failure of the unit.
      delay_ends_job: whether a delay now would fail the job for good (the streak of host
        delays passed the family's limit on the last attempt: ``Attempt.delay_ends_job``);
        the URL is then finished without its page, so the crawl still completes.

    Raises:
      RecordMissing: the task is missing or of another organization, or never claimed url.
      Delay: the fetch must wait (host window, Retry-After); nothing was written.
      Retryable (or any other exception): a transient failure on a non-final attempt.
    """
    org, task = organization_id, crawl_task_id
    claimed = crawl_ledger.ledger_url(session, organization_id=org, crawl_task_id=task, url=url)
    if claimed is None:
        raise RecordMissing(f"crawl task {crawl_task_id} never claimed {url}")
    if claimed.finished:
        children = crawl_ledger.children_of(
            session, organization_id=org, crawl_task_id=task, parent_url=url
        )
        return CrawlStepResult(children, finished=False, page=None, replayed=True)
    page = _fetch_and_store(
        session, org, task, url, fetch, final_attempt, store_page, delay_ends_job
    )
    if isinstance(page, CrawlStepResult):
        return page
    children = crawl_ledger.claim_children(
        session,
        organization_id=org,
        crawl_task_id=task,
        parent_url=url,
        depth=claimed.depth,
        urls=page.links,
    )
    finished = crawl_ledger.finish(session, organization_id=org, crawl_task_id=task, url=url)
    return CrawlStepResult(children, finished, page)
