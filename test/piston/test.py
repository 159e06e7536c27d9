try:
    raise ExceptionGroup("group", [ValueError("checked")])
except* ValueError:
    print("OK")
