# frozen_string_literal: true

require "test_helper"

# The OpenAPI document (GET /internal/openapi.json) is the contract: every call the client
# makes exists there with the parameters and body it sends, and what it reads is what the
# document answers.
class ContractTest < Minitest::Test
  include SpeedtierTest

  def schema(name) = openapi.dig("components", "schemas", name) || flunk("no schema #{name}")

  def test_every_operation_exists_with_its_parameters_and_body
    Speedtier::OPERATIONS.each_value do |operation|
      spec = openapi.dig("paths", operation.path, operation.method.downcase)
      refute_nil spec, "#{operation.method} #{operation.path} is not in the OpenAPI document"
      query = (spec["parameters"] || []).select { |p| p["in"] == "query" }.map { |p| p["name"] }
      operation.query.each do |name|
        assert_includes query, name, "#{operation.path}: no query parameter #{name}"
      end
      path_params = (spec["parameters"] || []).select { |p| p["in"] == "path" }.map { |p| p["name"] }
      assert_equal operation.path.scan(/\{(\w+)\}/).flatten.sort, path_params.sort
      ref = spec.dig("requestBody", "content", "application/json", "schema", "$ref")
      unless operation.body_schema
        assert_nil ref, "#{operation.path}: a request body the client does not send"
        next
      end

      assert_equal "#/components/schemas/#{operation.body_schema}", ref, operation.path
      assert_equal ["requests"], schema(operation.body_schema)["properties"].keys
    end
  end

  def test_knowledge_base_sync_kinds_and_their_parameters
    items = schema("KnowledgeBaseSyncEnqueueBody").dig("properties", "requests", "items")
    mapping = items.dig("discriminator", "mapping")
    assert_equal Speedtier::KNOWLEDGE_BASE_SYNC_KINDS.keys.sort, mapping.keys.sort
    Speedtier::KNOWLEDGE_BASE_SYNC_KINDS.each do |kind, spec|
      request = schema(mapping.fetch(kind).split("/").last)
      assert_equal (spec.params + %w[kind organization_id]).sort, request["properties"].keys.sort,
                   kind
      assert_equal (spec.required + %w[kind organization_id]).sort, request["required"].sort, kind
    end
  end

  def test_answers_read_are_the_documented_ones
    assert_equal Speedtier::EnqueuedJob.members.map(&:to_s).sort,
                 schema("EnqueuedJob")["properties"].keys.sort
    assert_equal Speedtier::JobRecord.members.map(&:to_s).sort,
                 schema("JobRecord")["properties"].keys.sort
    enqueue = openapi.dig("paths", "/internal/jobs/enqueue", "post", "responses")
    assert_equal "#/components/schemas/EnqueueAccepted",
                 enqueue.dig("202", "content", "application/json", "schema", "$ref")
    assert enqueue.key?("503"), "503 (retried by the client) is documented"
  end

  def test_every_error_status_the_client_names_is_documented
    statuses = openapi["paths"].values.flat_map(&:values).flat_map { |op| op["responses"].keys }
    Speedtier::ERRORS_BY_STATUS.each_key { |status| assert_includes statuses, status.to_s }
  end
end
