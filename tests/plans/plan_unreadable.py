# an object that answers isStreaming but has no py4j plan (a stand-in, a wrapper; Spark Connect's own DataFrame is
# test_accelerate's: its line says what to do)
# fail: PLAN_UNREADABLE
class StandIn:
    isStreaming = True
    sparkSession = spark

df = StandIn()
