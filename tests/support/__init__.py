"""What tests share: factories, the loopback model server and its batch APIs, and the helpers
more than one test module uses."""
