# frozen_string_literal: true

require "test_helper"

# Against the real API: enqueue one and many, resends deduplicated, job status, the
# knowledge-base sync units, and each error status as its exception class.
class ClientTest < Minitest::Test
  include SpeedtierTest

  def test_enqueue_one_and_a_resend_is_deduplicated
    document = unique_id
    first = client.enqueue("sync_document", organization_id: 7, document_id: document)
    assert_equal "added", first.outcome
    assert_equal "sync_document", first.kind
    assert_match(/#{document}/, first.job_id)

    again = client.enqueue("sync_document", organization_id: 7, document_id: document)
    assert_equal "deduplicated", again.outcome
    assert_equal first.job_id, again.job_id
  end

  def test_enqueue_many_answers_in_order
    ids = [unique_id, unique_id, unique_id]
    jobs = client.enqueue_many([
      { kind: "sync_document", organization_id: 7, document_id: ids[0] },
      { kind: "sync_source", organization_id: 7, source_id: ids[1] },
      { kind: "start_crawl", organization_id: 8, crawl_task_id: ids[2] }
    ])
    assert_equal %w[sync_document sync_source start_crawl], jobs.map(&:kind)
    assert_equal %w[added added added], jobs.map(&:outcome)
    ids.zip(jobs).each { |id, job| assert_match(/#{id}/, job.job_id) }
  end

  def test_job_status_and_tenant_scope
    job = client.enqueue("sync_source", organization_id: 9, source_id: unique_id)
    record = client.job(job.job_id)
    assert_equal job.job_id, record.job_id
    assert_equal "waiting", record.state
    assert_equal 9, record.organization_id
    assert_equal job.queue, record.queue
    assert_kind_of Integer, record.created_at_ms

    assert_equal "waiting", client.job(job.job_id, organization_id: 9).state
    error = assert_raises(Speedtier::NotFound) { client.job(job.job_id, organization_id: 10) }
    assert_equal 404, error.status
    assert_raises(Speedtier::NotFound) { client.job("kb-document-sync-0-none") }
  end

  def test_knowledge_base_sync_units
    document, source, task = unique_id, unique_id, unique_id
    units = [
      client.sync_document(organization_id: 7, document_id: document),
      client.sync_document_chunks(organization_id: 7, document_id: document),
      client.sync_source(organization_id: 7, source_id: source, provider: "notion"),
      client.start_crawl(organization_id: 7, crawl_task_id: task),
      client.crawl_url(organization_id: 7, crawl_task_id: task, url: "https://example.com/a", depth: 1)
    ]
    assert_equal %w[sync_document sync_document_chunks sync_source start_crawl crawl_url],
                 units.map(&:kind)
    assert(units.all? { |unit| unit.outcome == "added" })
    batch = client.knowledge_base_sync([{ kind: "sync_source", organization_id: 7, source_id: source,
                                          provider: "notion" }])
    assert_equal "deduplicated", batch.first.outcome
    assert_raises(ArgumentError) { client.sync_document(organization_id: 7) }
    assert_raises(ArgumentError) { client.sync_source(organization_id: 7, source_id: 1, colour: "red") }
  end

  def test_an_invalid_batch_is_refused_whole_with_its_fields
    kept = unique_id
    error = assert_raises(Speedtier::InvalidRequest) do
      client.enqueue_many([
        { kind: "sync_document", organization_id: 7, document_id: kept },
        { kind: "sync_document", organization_id: "seven", document_id: 1 }
      ])
    end
    assert_equal 400, error.status
    assert_includes error.fields.keys, "requests[1].organization_id"
    # nothing was enqueued: the valid request of the batch is new when sent alone
    assert_equal "added", client.enqueue("sync_document", organization_id: 7, document_id: kept).outcome
  end

  def test_a_wrong_token_is_unauthorized_and_not_retried
    sleeps = []
    wrong = Speedtier::Client.new(url: api_url, token: "wrong", sleeper: ->(s) { sleeps << s })
    error = assert_raises(Speedtier::Unauthorized) { wrong.job("anything") }
    assert_equal 401, error.status
    assert_empty sleeps
  end
end
