# a DataFrame whose plan cannot be read over py4j (Spark Connect's)
# fail: PLAN_UNREADABLE
class Connect:
    isStreaming = True
    sparkSession = spark

df = Connect()
