"""How the arena's files import each other: item imports between its top-level modules, and
those that close a circle (an edge inside a strongly connected component of the module
graph: a file importing one that, directly or through others, imports it back).

Run from the repository root: python3 lab/scripts/arena_imports.py
"""
import glob
import re
from collections import defaultdict

ROOT = "src/arena/"
mods = sorted({p[len(ROOT):].split("/")[0].replace(".rs", "") for p in glob.glob(ROOT + "*")})
mods = [m for m in mods if m != "mod"] + ["mod"]
edges = defaultdict(int)
for path in glob.glob(ROOT + "**/*.rs", recursive=True):
    me = path[len(ROOT):].split("/")[0].replace(".rs", "")
    text = open(path).read().split("#[cfg(test)]")[0]
    for m in re.finditer(r"use (?:super::|crate::arena::)(?:super::)*([^;]+);", text, re.S):
        body = m.group(1)
        named = [t for t in re.findall(r"\b(\w+)::", body) if t in mods and t != me]
        if body.split("::")[0].strip("{ ") in mods:
            named = named or [body.split("::")[0].strip("{ ")]
        if not named and me != "mod":
            named = ["mod"]  # an item of the arena's root
        for t in set(named):
            if t != me:
                edges[(me, t)] += 1
# Strongly connected components (Tarjan).
graph = defaultdict(set)
for a, b in edges:
    graph[a].add(b)
index, low, stack, on, comp = {}, {}, [], set(), {}
counter = [0]
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
    for w in graph[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        while True:
            w = stack.pop(); on.discard(w); comp[w] = v
            if w == v:
                break
for v in list(graph) + mods:
    if v not in index:
        visit(v)
circular = {e: n for e, n in edges.items() if comp[e[0]] == comp[e[1]]}
print(f"module imports between the arena's files: {len(edges)}")
print(f"of which close a circle: {len(circular)}")
for (a, b) in sorted(circular):
    print(f"  {a} -> {b}")
