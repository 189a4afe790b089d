# a continuous trigger
# fail: TRIGGER
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.trigger(continuous="1 second")._why_not()
