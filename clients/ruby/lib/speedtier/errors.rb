# frozen_string_literal: true

module Speedtier
  # Every error the client raises.
  class Error < StandardError; end

  # The API could not be reached, or did not answer within the timeouts (after the retries).
  # A resend of an enqueue is safe: the job id is deterministic, so the API deduplicates it.
  class ConnectionError < Error; end

  # Opening the connection or reading the answer took longer than its timeout.
  class TimeoutError < ConnectionError; end

  # The API answered with an error status. +status+, +error+ (the body's code, e.g.
  # "queue_unavailable") and +body+ (the parsed JSON, or the raw text) say what.
  class HTTPError < Error
    attr_reader :status, :error, :body

    def initialize(status, body)
      @status = status
      @body = body
      @error = body.is_a?(Hash) ? body["error"] : nil
      detail = body.is_a?(Hash) ? (body["message"] || body["fields"] || body["error"]) : body
      super("HTTP #{status}#{@error ? " #{@error}" : ""}: #{detail}")
    end
  end

  # 400: the request (the whole batch) was refused and nothing was enqueued. +fields+ maps each
  # bad field's path (e.g. "requests[0].organization_id") to its message.
  class InvalidRequest < HTTPError
    def fields
      body.is_a?(Hash) ? (body["fields"] || {}) : {}
    end
  end

  # 401: missing or wrong bearer token (INTERNAL_API_TOKEN).
  class Unauthorized < HTTPError; end

  # 404: no such job, or a job of another organization.
  class NotFound < HTTPError; end

  # 413: the body is over the API's size limit (SPEEDTIER_API_MAX_BODY_BYTES); send fewer
  # requests per batch.
  class PayloadTooLarge < HTTPError; end

  # 503 after every retry: Redis or PostgreSQL is unreachable, nothing can be assumed
  # accepted. +retry_after+ is the API's Retry-After in seconds.
  class Unavailable < HTTPError
    attr_reader :retry_after

    def initialize(status, body, retry_after = nil)
      @retry_after = retry_after
      super(status, body)
    end
  end

  # Any other 5xx.
  class ServerError < HTTPError; end

  ERRORS_BY_STATUS = {
    400 => InvalidRequest, 401 => Unauthorized, 404 => NotFound, 413 => PayloadTooLarge
  }.freeze
end
