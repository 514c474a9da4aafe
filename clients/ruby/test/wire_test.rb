# frozen_string_literal: true

require "test_helper"

# What the client puts on the wire, read by a local socket that records the request: the
# traceparent header (configured or per call), the bearer token, and the timeouts.
class WireTest < Minitest::Test
  TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

  # A one-request server answering +answer+ (or nothing, with +silent+); returns the URL and a
  # queue receiving each request's head.
  def recorder(answer: nil, silent: false)
    server = TCPServer.new("127.0.0.1", 0)
    heads = Queue.new
    held = []
    Thread.new do
      loop do
        socket = server.accept
        head = +""
        while (line = socket.gets) && line != "\r\n"
          head << line
        end
        length = head[/^content-length: (\d+)/i, 1].to_i
        socket.read(length) if length.positive?
        heads << head
        if silent
          held << socket # never answered; closed with the server
          next
        end
        socket.write(answer)
        socket.close
      end
    rescue IOError
      nil
    end
    @servers = (@servers || []) << server
    ["http://127.0.0.1:#{server.addr[1]}", heads]
  end

  def teardown
    (@servers || []).each(&:close)
  end

  def ok_answer
    body = JSON.generate(jobs: [{ job_id: "j", outcome: "added", queue: "q.fast", kind: "k" }])
    "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: #{body.bytesize}" \
      "\r\nConnection: close\r\n\r\n#{body}"
  end

  def test_traceparent_from_the_configuration_and_from_the_call
    url, heads = recorder(answer: ok_answer)
    current = TRACEPARENT
    client = Speedtier::Client.new(url: url, token: "t0k", traceparent: -> { current })
    client.enqueue("k", organization_id: 1)
    head = heads.pop
    assert_match(/^traceparent: #{TRACEPARENT}\r$/i, head)
    assert_match(/^authorization: Bearer t0k\r$/i, head)
    assert_match(%r{^POST /internal/jobs/enqueue HTTP/1.1}, head)

    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    client.enqueue("k", organization_id: 1, traceparent: other)
    assert_match(/^traceparent: #{other}\r$/i, heads.pop)
  end

  def test_no_traceparent_header_without_a_context
    url, heads = recorder(answer: ok_answer)
    Speedtier::Client.new(url: url, token: "t").enqueue("k", organization_id: 1)
    refute_match(/^traceparent:/i, heads.pop)
  end

  def test_a_silent_server_times_out_after_the_retries
    url, heads = recorder(silent: true)
    sleeps = []
    client = Speedtier::Client.new(url: url, token: "t", read_timeout: 0.3, max_retries: 1,
                                   sleeper: ->(s) { sleeps << s })
    assert_raises(Speedtier::TimeoutError) { client.enqueue("k", organization_id: 1) }
    assert_equal 2, heads.size # sent, and resent once
    assert_equal 1, sleeps.size
  end
end
