status = "OK"
result = {status:}
puts result[:status]
