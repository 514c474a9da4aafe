"""All models; importing this package registers every table on its metadata."""

from shared.db.models.api2 import KnowledgeBaseCrawlTaskUrl
from shared.db.models.ingestion import (
    IngestionApiKey,
    KbChunk,
    KbDocument,
    KbDocumentVersion,
    KnowledgeBase,
    UsageEvent,
)
from shared.db.models.rails import (
    Conversation,
    ConversationUpload,
    DataSource,
    DocumentChunk,
    FlipperFeature,
    FlipperGate,
    KnowledgeBaseCrawlTask,
    KnowledgeBaseDocument,
    KnowledgeBaseDocumentSection,
    KnowledgeBaseSection,
    KnowledgeBaseSource,
    Organization,
    OrganizationDataSource,
    PgSearchDocument,
)
from shared.db.models.rails_reports import Employee, Evaluation, TicketRule

__all__ = [
    "Conversation",
    "ConversationUpload",
    "DataSource",
    "DocumentChunk",
    "Employee",
    "Evaluation",
    "FlipperFeature",
    "FlipperGate",
    "IngestionApiKey",
    "KbChunk",
    "KbDocument",
    "KbDocumentVersion",
    "KnowledgeBase",
    "KnowledgeBaseCrawlTask",
    "KnowledgeBaseCrawlTaskUrl",
    "KnowledgeBaseDocument",
    "KnowledgeBaseDocumentSection",
    "KnowledgeBaseSection",
    "KnowledgeBaseSource",
    "Organization",
    "OrganizationDataSource",
    "PgSearchDocument",
    "TicketRule",
    "UsageEvent",
]
