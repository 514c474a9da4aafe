"""Who and what a call upload is about, resolved in the Rails processors' order.

| identity | rule (first match wins) |
| --- | --- |
| organization data source | the upload's own, else the org's live one of the source |
| employee (agent) | email -> integration profile (data source + agent id) -> name |
| client (customer) | phone -> email -> name; created when none matches and one is given |
| conversation | ``organization_data_source_id`` + ``external_id`` (call id), no external_type |
| part | (conversation, ``external_id`` = call id), ``part_type`` ``call`` |
| call detail | one per part |
| memberships | the agent and the client joined to the conversation; a different agent is replaced |

Everything runs in the caller's (persistence) transaction. Creations that two processors of
the same call could race (conversation, client) take a transaction-scoped advisory lock on
the identity first; parts, call details and memberships rely on their unique indexes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.uploads.call_metadata import CallRecord, Person
from services.uploads.errors import metadata_invalid
from shared.db.base import utcnow
from shared.db.models import (
    CallDetail,
    Client,
    Conversation,
    ConversationMembership,
    ConversationPart,
    ConversationUpload,
    DataSource,
    Employee,
    IntegrationProfile,
    OrganizationDataSource,
)
from shared.db.tenant import select_scoped

_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")


@dataclass(frozen=True)
class Identities:
    organization_data_source_id: int
    employee_id: int | None
    client_id: int | None
    conversation_id: int
    conversation_part_id: int
    call_detail_id: int


def data_source_of(session: Session, organization_id: int, upload: ConversationUpload) -> int:
    """The upload's organization data source id (MetadataInvalid when there is none)."""
    query = select_scoped(OrganizationDataSource, organization_id=organization_id).where(
        OrganizationDataSource.discarded_at.is_(None)
    )
    if upload.organization_data_source_id is not None:
        query = query.where(OrganizationDataSource.id == upload.organization_data_source_id)
    else:
        query = query.join(DataSource, DataSource.id == OrganizationDataSource.data_source_id)
        query = query.where(DataSource.key == upload.source)
    found = session.execute(query.order_by(OrganizationDataSource.id).limit(1)).scalar()
    if found is None:
        raise metadata_invalid(f"no live {upload.source} data source for the upload")
    return found.id


def employee_of(
    session: Session, organization_id: int, data_source_id: int, agent: Person
) -> int | None:
    """The agent's employee id: by email, then integration profile, then name."""
    live = select_scoped(Employee, organization_id=organization_id).where(
        Employee.discarded_at.is_(None)
    )
    if agent.email:
        query = live.where(func.lower(Employee.email) == agent.email).order_by(Employee.id)
        found = session.execute(query.limit(1)).scalar()
        if found is not None:
            return found.id
    if agent.external_id:
        query = live.join(IntegrationProfile, IntegrationProfile.employee_id == Employee.id).where(
            IntegrationProfile.organization_id == organization_id,
            IntegrationProfile.organization_data_source_id == data_source_id,
            IntegrationProfile.external_id == agent.external_id,
        )
        found = session.execute(query.limit(1)).scalar()
        if found is not None:
            return found.id
    if agent.name:
        query = live.where(func.lower(Employee.name) == agent.name.lower()).order_by(Employee.id)
        found = session.execute(query.limit(1)).scalar()
        if found is not None:
            return found.id
    return None


def client_of(session: Session, organization_id: int, customer: Person) -> int | None:
    """The customer's client id by phone, then email, then name; created when unmatched."""
    rules = (
        (Client.phone, customer.phone),
        (func.lower(Client.email), customer.email),
        (func.lower(Client.name), customer.name.lower() if customer.name else None),
    )
    if not any(value for _, value in rules):
        return None
    key = customer.phone or customer.email or (customer.name or "").lower()
    session.execute(_LOCK, {"key": f"client:{organization_id}:{key}"})
    for column, value in rules:
        if value:
            query = select_scoped(Client, organization_id=organization_id).where(column == value)
            found = session.execute(query.order_by(Client.id).limit(1)).scalar()
            if found is not None:
                return found.id
    client = Client(
        organization_id=organization_id,
        phone=customer.phone,
        email=customer.email,
        name=customer.name,
    )
    session.add(client)
    session.flush()
    return client.id


def conversation_of(
    session: Session, organization_id: int, data_source_id: int, call_id: str
) -> Conversation:
    """The call's conversation (``external_type IS NULL``), created when missing."""
    session.execute(_LOCK, {"key": f"conversation:{data_source_id}:{call_id}"})
    query = select_scoped(Conversation, organization_id=organization_id).where(
        Conversation.organization_data_source_id == data_source_id,
        Conversation.external_id == call_id,
        Conversation.external_type.is_(None),
    )
    found = session.execute(query.order_by(Conversation.id).limit(1)).scalar()
    if found is not None:
        return found
    conversation = Conversation(
        organization_id=organization_id,
        organization_data_source_id=data_source_id,
        external_id=call_id,
    )
    session.add(conversation)
    session.flush()
    return conversation


def _upsert_id(session: Session, model: type, values: dict[str, object], keys: list[str]) -> int:
    now = utcnow()
    statement = (
        insert(model)
        .values(**values, created_at=now, updated_at=now)
        .on_conflict_do_nothing(index_elements=keys)
    )
    session.execute(statement)
    criteria = [getattr(model, key) == values[key] for key in keys]
    return int(session.execute(select(model.id).where(*criteria)).scalar_one())  # type: ignore[attr-defined]


def link_members(
    session: Session,
    organization_id: int,
    conversation_id: int,
    *,
    employee_id: int | None,
    client_id: int | None,
) -> None:
    """Join the agent and the client; an agent other than ``employee_id`` is replaced."""
    if employee_id is not None:
        session.execute(
            delete(ConversationMembership).where(
                ConversationMembership.organization_id == organization_id,
                ConversationMembership.conversation_id == conversation_id,
                ConversationMembership.role == "agent",
                ConversationMembership.member_id != employee_id,
            )
        )
    for member_type, member_id, role in (
        ("Employee", employee_id, "agent"),
        ("Client", client_id, "client"),
    ):
        if member_id is not None:
            _upsert_id(
                session,
                ConversationMembership,
                {
                    "organization_id": organization_id,
                    "conversation_id": conversation_id,
                    "member_type": member_type,
                    "member_id": member_id,
                    "role": role,
                },
                ["conversation_id", "member_type", "member_id"],
            )


def resolve(
    session: Session, organization_id: int, upload: ConversationUpload, call: CallRecord
) -> Identities:
    """Every identity of the call, created where the rules create them."""
    data_source_id = data_source_of(session, organization_id, upload)
    employee_id = employee_of(session, organization_id, data_source_id, call.agent)
    client_id = client_of(session, organization_id, call.customer)
    conversation = conversation_of(session, organization_id, data_source_id, call.call_id)
    part_id = _upsert_id(
        session,
        ConversationPart,
        {
            "organization_id": organization_id,
            "conversation_id": conversation.id,
            "external_id": call.call_id,
            "part_type": "call",
            "author_type": "Employee" if employee_id is not None else None,
            "author_id": employee_id,
            "sent_at": call.started_at,
        },
        ["conversation_id", "external_id"],
    )
    detail_id = _upsert_id(
        session,
        CallDetail,
        {
            "organization_id": organization_id,
            "conversation_part_id": part_id,
            "external_id": call.call_id,
            "direction": call.direction,
            "from_number": call.from_number,
            "to_number": call.to_number,
            "started_at": call.started_at,
        },
        ["conversation_part_id"],
    )
    link_members(
        session, organization_id, conversation.id, employee_id=employee_id, client_id=client_id
    )
    return Identities(
        organization_data_source_id=data_source_id,
        employee_id=employee_id,
        client_id=client_id,
        conversation_id=conversation.id,
        conversation_part_id=part_id,
        call_detail_id=detail_id,
    )
