# a union of two streams
# fail: NODE_KIND
df = s.union(s)
