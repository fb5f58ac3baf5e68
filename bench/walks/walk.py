#!/usr/bin/env python3
"""Counts the walk of one request (bench/RESULTS.md section 6, "The request walk").

Input: an outline, one call a line, indented two spaces per call depth: "path/file.cc: Function". The first
line is where the request starts. A function already listed is not read again: a later line naming it (and
the lines under it) is skipped. Output: files, steps (each move of the reader from one file to another: into
a callee's file, and back to the caller's when the callee returns) and returns (steps into a file already
visited).
Usage: bench/walks/walk.py [-v] bench/walks/filter.txt [...]   (-v: print each step)
"""
import sys

VERBOSE = False


def count(lines):
    nodes = []  # (depth, file, function)
    for raw in lines:
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        file, _, function = raw.strip().partition(": ")
        nodes.append((depth, file, function.strip()))
    seen, visited = set(), set()
    state = {"cursor": nodes[0][1], "steps": 0, "returns": 0}
    visited.add(nodes[0][1])

    def move(to):
        if to == state["cursor"]:
            return
        state["steps"] += 1
        before = set(visited)
        if to in visited:
            state["returns"] += 1
        visited.add(to)
        state["cursor"] = to
        if VERBOSE:
            print(("  return " if to in before else "  step   ") + to)

    stack = []  # files of the functions being read, outermost first
    skip_below = None
    for depth, file, function in nodes:
        if skip_below is not None and depth > skip_below:
            continue
        skip_below = None
        while len(stack) > depth:
            stack.pop()
            if stack:
                move(stack[-1])
        if (file, function) in seen:
            skip_below = depth
            continue
        seen.add((file, function))
        move(file)
        stack.append(file)
    while stack:
        stack.pop()
        if stack:
            move(stack[-1])
    return len(visited), state["steps"], state["returns"]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "-v":  # print every step
        VERBOSE = True
        args = args[1:]
    for path in args:
        with open(path) as f:
            files, steps, returns = count(f.readlines())
        print(f"{path}: {files} files, {steps} steps, {returns} returns")
