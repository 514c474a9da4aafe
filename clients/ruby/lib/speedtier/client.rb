# frozen_string_literal: true

require "json"
require "net/http"
require "time"
require "uri"

module Speedtier
  # One enqueued job: +outcome+ is "added", "replaced" (a finished id runs again) or
  # "deduplicated" (the id is already waiting, delayed or running: nothing changed).
  EnqueuedJob = Struct.new(:job_id, :outcome, :queue, :kind, keyword_init: true)

  # A job's record (GET /internal/jobs/{job_id}); +state+ is waiting, parked, delayed, active,
  # completed, failed, record_missing or skipped; times are epoch milliseconds.
  JobRecord = Struct.new(
    :job_id, :state, :family, :queue, :organization_id, :attempts, :failures,
    :created_at_ms, :started_at_ms, :finished_at_ms, :last_error,
    keyword_init: true
  )

  # The internal API's client.
  #
  #   client = Speedtier::Client.new(url: "http://speedtier-api:8080", token: ENV["SPEEDTIER_TOKEN"])
  #   client.enqueue("sync_document", organization_id: 7, document_id: 42)
  #
  # Retries: a 503 (Redis or PostgreSQL unreachable), a refused or reset connection and a
  # timeout are retried up to +max_retries+ times, waiting the answer's Retry-After when it
  # gives one, else +base_delay+ doubled per attempt (with jitter), never more than
  # +max_delay+. Resending is safe: a job's id is derived from its request, so an enqueue the
  # API had accepted before the connection broke comes back "deduplicated".
  #
  # Tracing: +traceparent+ (a W3C trace context string, or a callable returning one, e.g. the
  # current OpenTelemetry span's) is sent as the +traceparent+ header of every call; a call's
  # own +traceparent:+ argument takes precedence.
  class Client
    DEFAULTS = {
      open_timeout: 2.0, read_timeout: 10.0, write_timeout: 10.0,
      max_retries: 3, base_delay: 0.5, max_delay: 30.0
    }.freeze
    RETRIED_ERRORS = [
      Errno::ECONNREFUSED, Errno::ECONNRESET, Errno::EHOSTUNREACH, Errno::EPIPE, EOFError,
      Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout, IOError, SocketError
    ].freeze

    attr_reader :url, :options

    def initialize(url:, token:, traceparent: nil, logger: nil, sleeper: nil, **options)
      unknown = options.keys - DEFAULTS.keys
      raise ArgumentError, "unknown options: #{unknown.join(", ")}" unless unknown.empty?

      @url = URI(url.to_s.chomp("/"))
      @token = token
      @traceparent = traceparent
      @logger = logger
      @sleeper = sleeper || ->(seconds) { sleep(seconds) }
      @options = DEFAULTS.merge(options)
    end

    # Enqueue one job of +kind+ for +organization_id+ (nil for platform-wide kinds) with the
    # kind's parameters; returns its EnqueuedJob.
    def enqueue(kind, organization_id:, traceparent: nil, **params)
      enqueue_many([{ kind: kind, organization_id: organization_id, **params }],
                   traceparent: traceparent).first
    end

    # Enqueue a batch (at most 1000 requests, each a Hash with :kind, :organization_id and the
    # kind's parameters), accepted whole or not at all; one EnqueuedJob per request, in order.
    def enqueue_many(requests, traceparent: nil)
      post_batch(OPERATIONS[:enqueue], requests, traceparent)
    end

    # The record of job +job_id+; with +organization_id+, a job of another organization raises
    # NotFound like an unknown id.
    def job(job_id, organization_id: nil, traceparent: nil)
      query = organization_id.nil? ? {} : { organization_id: organization_id }
      path = OPERATIONS[:job].path.sub("{job_id}", URI.encode_www_form_component(job_id))
      body = request("GET", path, query: query, traceparent: traceparent)
      JobRecord.new(**body.slice(*JobRecord.members.map(&:to_s)).transform_keys(&:to_sym))
    end

    # Knowledge Library sync units, as Rails' KnowledgeBaseSyncDispatch sends them: each
    # request a Hash with :kind (sync_document, sync_source, sync_document_chunks, start_crawl,
    # crawl_url), :organization_id and the kind's parameters.
    def knowledge_base_sync(requests, traceparent: nil)
      post_batch(OPERATIONS[:knowledge_base_sync], requests, traceparent)
    end

    # One method per unit, e.g. sync_document(organization_id:, document_id:, provider: nil,
    # organization_data_source_id: nil); a missing or unknown parameter raises ArgumentError
    # before anything is sent.
    KNOWLEDGE_BASE_SYNC_KINDS.each do |kind, spec|
      define_method(kind) do |organization_id:, traceparent: nil, **given|
        missing = spec.required - given.keys.map(&:to_s)
        raise ArgumentError, "#{kind} needs #{missing.join(", ")}" unless missing.empty?

        unknown = given.keys.map(&:to_s) - spec.params
        raise ArgumentError, "#{kind} takes no #{unknown.join(", ")}" unless unknown.empty?

        knowledge_base_sync([{ kind: kind, organization_id: organization_id, **given }],
                            traceparent: traceparent).first
      end
    end

    private

    def post_batch(operation, requests, traceparent)
      body = request(operation.method, operation.path, body: { requests: requests },
                                                       traceparent: traceparent)
      body.fetch("jobs").map do |job|
        EnqueuedJob.new(**job.slice(*EnqueuedJob.members.map(&:to_s)).transform_keys(&:to_sym))
      end
    end

    def request(method, path, query: {}, body: nil, traceparent: nil)
      attempt = 0
      loop do
        begin
          response = send_once(method, path, query, body, traceparent)
        rescue *RETRIED_ERRORS => e
          raise wrap(e) if attempt >= @options[:max_retries]

          wait(attempt, nil, "#{method} #{path}: #{e.class}")
          attempt += 1
          next
        end
        status = response.code.to_i
        return parse(response) if status < 300

        retry_after = retry_after_of(response)
        if status == 503 && attempt < @options[:max_retries]
          wait(attempt, retry_after, "#{method} #{path}: 503")
          attempt += 1
          next
        end
        raise error_for(status, parse(response), retry_after)
      end
    end

    def send_once(method, path, query, body, traceparent)
      uri = @url.dup
      uri.path = "#{@url.path}#{path}"
      uri.query = URI.encode_www_form(query) unless query.empty?
      http = Net::HTTP.new(uri.host, uri.port)
      http.use_ssl = uri.scheme == "https"
      http.open_timeout = @options[:open_timeout]
      http.read_timeout = @options[:read_timeout]
      http.write_timeout = @options[:write_timeout]
      http.max_retries = 0 # retries are this client's, with backoff
      request = Net::HTTPGenericRequest.new(method, !body.nil?, true, uri.request_uri, headers(traceparent))
      request.body = JSON.generate(body) unless body.nil?
      http.start { |connection| connection.request(request) }
    end

    def headers(traceparent)
      headers = {
        "Authorization" => "Bearer #{@token}",
        "Accept" => "application/json",
        "User-Agent" => "speedtier-ruby/#{VERSION}"
      }
      headers["Content-Type"] = "application/json"
      context = traceparent || (@traceparent.respond_to?(:call) ? @traceparent.call : @traceparent)
      headers["traceparent"] = context.to_s if context && !context.to_s.empty?
      headers
    end

    def parse(response)
      text = response.body.to_s
      return {} if text.empty?

      JSON.parse(text)
    rescue JSON::ParserError
      text
    end

    def retry_after_of(response)
      value = response["Retry-After"]
      return nil if value.nil?

      Float(value)
    rescue ArgumentError
      begin
        [Time.httpdate(value) - Time.now, 0].max
      rescue ArgumentError
        nil
      end
    end

    def wait(attempt, retry_after, why)
      backoff = @options[:base_delay] * (2**attempt) * (0.5 + (rand / 2))
      seconds = [retry_after || backoff, @options[:max_delay]].min
      @logger&.warn("speedtier: #{why}, retrying in #{seconds.round(2)}s")
      @sleeper.call(seconds)
    end

    def wrap(error)
      timeout = [Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout].any? { |k| error.is_a?(k) }
      (timeout ? TimeoutError : ConnectionError).new("#{error.class}: #{error.message}")
    end

    def error_for(status, body, retry_after)
      return Unavailable.new(status, body, retry_after) if status == 503

      klass = ERRORS_BY_STATUS[status] || (status >= 500 ? ServerError : HTTPError)
      klass.new(status, body)
    end
  end
end
