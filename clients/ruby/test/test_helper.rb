# frozen_string_literal: true

# The suite runs against a real `speedtier api` that tests/e2e/test_ruby_client.py starts
# (with its own Redis and a migrated PostgreSQL database) and describes in the environment:
#   SPEEDTIER_API_URL, SPEEDTIER_API_TOKEN           the API and its bearer token
#   SPEEDTIER_TEST_REDIS_SERVER, _PORT, _DIR         the API's Redis: binary, port, directory
# Run by hand: ruby -Ilib -Itest test/run.rb (with those variables set).

require "minitest/autorun"
require "json"
require "net/http"
require "securerandom"
require "socket"
require "speedtier"

module SpeedtierTest
  def self.env(name)
    ENV.fetch(name) { raise "#{name} is not set: run the suite through tests/e2e/test_ruby_client.py" }
  end

  def api_url = SpeedtierTest.env("SPEEDTIER_API_URL")
  def token = SpeedtierTest.env("SPEEDTIER_API_TOKEN")

  def client(**options)
    Speedtier::Client.new(url: api_url, token: token, **options)
  end

  # A number no other test (or earlier run) used: ids derive from it.
  def unique_id = SecureRandom.random_number(10**12) + 1

  def openapi
    @openapi ||= begin
      uri = URI("#{api_url}/internal/openapi.json")
      request = Net::HTTP::Get.new(uri, "Authorization" => "Bearer #{token}")
      response = Net::HTTP.start(uri.host, uri.port) { |http| http.request(request) }
      raise "openapi.json: HTTP #{response.code}" unless response.code == "200"

      JSON.parse(response.body)
    end
  end
end
