"""Checks SQL statements with a current ClickHouse parser (chdb-core's `formatQuery`).

Reads a JSON list of statements on stdin; prints a JSON list with, for each, either
{"ok": "<formatted statement>"} or {"error": "<parser message>"}.
"""
import json
import sys

import chdb


def literal(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def main():
    results = []
    for statement in json.load(sys.stdin):
        try:
            formatted = chdb.query(f"SELECT formatQuery({literal(statement)})", "TSVRaw").bytes().decode()
            results.append({"ok": formatted.strip()})
        except Exception as e:  # chdb raises its own error type with the server's message
            results.append({"error": str(e).splitlines()[0]})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
