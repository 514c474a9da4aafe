"""A webhook payload of the wrong shape is a :class:`MalformedWebhook` (the route answers
400, or 404 when it was only read to find the connection), never another exception (a 500):
whatever type a field holds, however deep the JSON nests, whatever text an id carries."""

from __future__ import annotations

import json

import pytest

from services.connectors import github, gitlab, linear
from services.connectors.nodes import MalformedWebhook, WebhookParse

GITHUB = {"X-GitHub-Delivery": "d1", "X-GitHub-Event": "issues"}
LINEAR = {"Linear-Delivery": "d1"}
GITLAB = {"X-Gitlab-Event-UUID": "d1"}
ISSUE_NOTE = {"object_kind": "note", "project": {"id": 77}}

MALFORMED: list[tuple[WebhookParse, dict[str, str], object]] = [
    # not a JSON object at all
    *(
        (parse, headers, body)
        for parse, headers in (
            (github.parse, GITHUB),
            (linear.parse, LINEAR),
            (gitlab.parse, GITLAB),
        )
        for body in ([1], "x", None, 5)
    ),
    # a field of the wrong type where an object or id is expected
    (github.parse, GITHUB, {"repository": "octo/hello"}),
    (github.parse, GITHUB, {"repository": {"full_name": 5}}),
    (github.parse, GITHUB, {"repository": {"full_name": "o/r"}, "issue": {"number": True}}),
    (linear.parse, LINEAR, {"type": "Issue", "data": "x"}),
    (linear.parse, LINEAR, {"type": "Issue", "data": {"id": 5}}),
    (linear.parse, LINEAR, {"type": ["Issue"], "data": {"id": "i1"}}),
    (gitlab.parse, GITLAB, {"object_kind": "issue", "project": {"id": True}}),
    (gitlab.parse, GITLAB, {"object_kind": "issue", "project": "77"}),
    (
        gitlab.parse,
        GITLAB,
        {"object_kind": "issue", "project": {"id": 77}, "object_attributes": "x"},
    ),
    (
        gitlab.parse,
        GITLAB,
        {**ISSUE_NOTE, "object_attributes": {"noteable_type": "Issue"}, "issue": "x"},
    ),
    # ids PostgreSQL text cannot hold
    (github.parse, GITHUB, {"repository": {"full_name": "a\x00b"}}),
    (github.parse, GITHUB, {"repository": {"full_name": "a\ud800b"}}),
    (linear.parse, LINEAR, {"type": "Issue", "data": {"id": "i1", "teamId": "t\x00"}}),
    (linear.parse, LINEAR, {"type": "Issue", "data": {"id": "i1", "team": {"id": "\ud800"}}}),
    (linear.parse, LINEAR, {"type": "Issue", "data": {"id": "i\x001"}}),
    (gitlab.parse, GITLAB, {"object_kind": "issue", "project": {"id": "7\x007"}}),
]


def _body(payload: object) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize(("parse", "headers", "payload"), MALFORMED)
def test_a_payload_of_the_wrong_shape_is_malformed(
    parse: WebhookParse, headers: dict[str, str], payload: object
) -> None:
    with pytest.raises(MalformedWebhook):
        parse(headers, _body(payload))


@pytest.mark.parametrize(
    ("parse", "headers"), [(github.parse, GITHUB), (linear.parse, LINEAR), (gitlab.parse, GITLAB)]
)
@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, b"{not json", b""])
def test_a_body_that_is_not_json_or_nests_too_deep_is_malformed(
    parse: WebhookParse, headers: dict[str, str], body: bytes
) -> None:
    with pytest.raises(MalformedWebhook, match="unreadable payload"):
        parse(headers, body)


def test_the_wrong_types_read_as_absent_where_a_field_is_optional() -> None:
    team = linear.parse(LINEAR, _body({"type": "Issue", "data": {"id": "i1", "team": "x"}}))
    assert team.root is None and [r.node_id for r in team.refs] == ["i1"]
    note = gitlab.parse(GITLAB, _body({**ISSUE_NOTE, "object_attributes": "x"}))
    assert note.refs == [] and note.root is not None and note.root.node_id == "77"
    other = github.parse(GITHUB, _body({"repository": {"full_name": "o/r"}, "issue": "x"}))
    assert other.refs == [] and other.root is not None and other.root.node_id == "o/r"


def test_well_formed_payloads_still_parse() -> None:
    issue = github.parse(
        GITHUB, _body({"repository": {"full_name": "o/r"}, "issue": {"number": 3}})
    )
    assert [r.node_id for r in issue.refs] == ["o/r#3"]
    comment = linear.parse(
        LINEAR, _body({"type": "Comment", "data": {"id": "c1", "issue": {"teamId": "t1"}}})
    )
    assert comment.root is not None and comment.root.node_id == "t1"
    merge = gitlab.parse(
        GITLAB,
        _body(
            {
                **ISSUE_NOTE,
                "object_attributes": {"noteable_type": "MergeRequest"},
                "merge_request": {"iid": 9},
            }
        ),
    )
    assert [r.node_id for r in merge.refs] == ["77!9"]
