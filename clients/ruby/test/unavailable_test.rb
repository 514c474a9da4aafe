# frozen_string_literal: true

require "io/wait"
require "test_helper"

# The API's Redis stops: the API answers 503 with Retry-After; the client waits what it says
# and resends, and the resend is accepted once Redis is back. Without retries, Unavailable.
class UnavailableTest < Minitest::Test
  include SpeedtierTest

  def redis_port = Integer(SpeedtierTest.env("SPEEDTIER_TEST_REDIS_PORT"))

  # Stopped once its process has exited: until then it may hold the API's connections open,
  # take a command on one and never answer it, which the API rightly reports as 504 (outcome
  # unknown). Redis answers a successful SHUTDOWN with nothing: the connection that sent it
  # reads its end when the process exits and the kernel closes its sockets.
  def stop_redis
    TCPSocket.open("127.0.0.1", redis_port) do |socket|
      socket.write("SHUTDOWN NOSAVE\r\n")
      raise "Redis did not exit within 10 s of SHUTDOWN" unless socket.wait_readable(10)

      reply = begin
        socket.read
      rescue Errno::ECONNRESET
        ""
      end
      raise "Redis refused SHUTDOWN: #{reply}" unless reply.empty?
    end
    sleep 0.05 until refused?
  end

  def refused?
    TCPSocket.open("127.0.0.1", redis_port).close
    false
  rescue Errno::ECONNREFUSED
    true
  end

  def start_redis
    pid = spawn(SpeedtierTest.env("SPEEDTIER_TEST_REDIS_SERVER"), "--port", redis_port.to_s,
                "--bind", "127.0.0.1", "--dir", SpeedtierTest.env("SPEEDTIER_TEST_REDIS_DIR"),
                "--save", "", "--appendonly", "no",
                in: File::NULL, out: File::NULL, err: File::NULL, pgroup: true)
    Process.detach(pid)
    sleep 0.05 until redis_up?
  end

  def redis_up?
    TCPSocket.open("127.0.0.1", redis_port) do |socket|
      socket.write("PING\r\n")
      socket.gets&.start_with?("+PONG")
    end
  rescue SystemCallError
    false
  end

  def test_503_is_retried_after_retry_after_and_the_resend_is_accepted
    stop_redis
    document = unique_id
    begin
      error = assert_raises(Speedtier::Unavailable) do
        client(max_retries: 0).enqueue("sync_document", organization_id: 7, document_id: document)
      end
      assert_equal 503, error.status
      assert_equal "queue_unavailable", error.error
      assert_equal 5.0, error.retry_after

      waited = []
      patient = client(max_retries: 3, sleeper: lambda { |seconds|
        waited << seconds
        start_redis unless redis_up? # Redis comes back while the client waits
        sleep 0.2
      })
      job = patient.enqueue("sync_document", organization_id: 7, document_id: document)
      assert_equal "added", job.outcome
      assert_equal [5.0], waited # the API's Retry-After, once
    ensure
      start_redis unless redis_up?
    end
  end
end
