# frozen_string_literal: true

require_relative "speedtier/version"
require_relative "speedtier/errors"
require_relative "speedtier/operations"
require_relative "speedtier/client"
