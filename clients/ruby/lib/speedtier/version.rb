# frozen_string_literal: true

module Speedtier
  VERSION = "0.1.0"
end
