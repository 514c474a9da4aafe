# frozen_string_literal: true

require_relative "lib/speedtier/version"

Gem::Specification.new do |spec|
  spec.name = "speedtier"
  spec.version = Speedtier::VERSION
  spec.summary = "Client of speedtier's internal API: enqueue jobs, read their state, " \
                 "dispatch knowledge-base syncs"
  spec.description = "Standard library only (net/http, json). Timeouts, retries with " \
                     "backoff on 503 honouring Retry-After, idempotent resends, " \
                     "traceparent passed through."
  spec.authors = ["speedtier"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.0"
  spec.files = Dir["lib/**/*.rb"] + ["README.md"]
  spec.require_paths = ["lib"]
end
