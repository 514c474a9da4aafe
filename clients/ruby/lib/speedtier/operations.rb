# frozen_string_literal: true

module Speedtier
  # Every call the client makes: the method, the path (OpenAPI template), the query parameters
  # it may send and, for a body, the schema its body follows. The contract test checks each
  # against the API's OpenAPI document (GET /internal/openapi.json).
  Operation = Struct.new(:name, :method, :path, :query, :body_schema, keyword_init: true)

  OPERATIONS = {
    enqueue: Operation.new(
      name: :enqueue, method: "POST", path: "/internal/jobs/enqueue", query: [],
      body_schema: "EnqueueBody"
    ),
    job: Operation.new(
      name: :job, method: "GET", path: "/internal/jobs/{job_id}", query: ["organization_id"],
      body_schema: nil
    ),
    knowledge_base_sync: Operation.new(
      name: :knowledge_base_sync, method: "POST", path: "/internal/knowledge_base_sync/enqueue",
      query: [], body_schema: "KnowledgeBaseSyncEnqueueBody"
    )
  }.freeze

  # The knowledge-base sync units Rails dispatches (KnowledgeBaseSyncDispatch): the
  # parameters each requires and may take beside organization_id.
  SyncKind = Struct.new(:required, :optional, keyword_init: true) do
    def params = required + optional
  end
  ROUTING = %w[provider organization_data_source_id].freeze

  KNOWLEDGE_BASE_SYNC_KINDS = {
    "sync_document" => SyncKind.new(required: %w[document_id], optional: ROUTING),
    "sync_source" => SyncKind.new(required: %w[source_id], optional: ROUTING),
    "sync_document_chunks" => SyncKind.new(required: %w[document_id], optional: ROUTING),
    "start_crawl" => SyncKind.new(required: %w[crawl_task_id], optional: ROUTING),
    "crawl_url" => SyncKind.new(required: %w[crawl_task_id url],
                                optional: %w[parent_url depth] + ROUTING)
  }.freeze
end
