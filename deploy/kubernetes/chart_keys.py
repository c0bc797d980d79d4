"""The documented value keys of the `jupyterhub` Helm chart, from its values.schema.yaml.

    python deploy/kubernetes/chart_keys.py values.schema.yaml --tag 4.4.0 --commit SHA --app-version 5.5.0 > chart-keys.txt

reads the chart's JSON schema (YAML) given on the command line and prints one line per key path,
tab-separated:

    PATH    TYPES    FLAGS

- PATH: the keys from the top, joined by "."; a key matched by a schema pattern (patternProperties)
  is written <REGEX>, e.g. hub.config.<^[A-Z].*$>.
- TYPES: the JSON types the schema allows there ("object", "string", "integer", "number",
  "boolean", "array", "null"), comma-separated, or "-" where it names none, or names them only in a
  conditional branch (imagePullSecret.registry is a string only when imagePullSecret.create is true).
- FLAGS: "open" where the schema lets anything go below this key (additionalProperties: true, or an
  object it describes no keys of, such as hub.extraConfig or singleuser.storage.extraVolumes), and
  enum=[...] (JSON) where it allows only those values.

It descends into `properties`, `patternProperties` and the branches of if/then/else, allOf, anyOf
and oneOf; it does not descend into arrays (the chart documents no keys of their items). Only the
schema is read: nothing is fetched. tests/grading/test_deploy.py checks deploy/kubernetes/values.yaml
against the output, vendored as deploy/kubernetes/chart-keys.txt.
"""
from __future__ import annotations

import argparse
import json
import sys

import yaml

BRANCHES = ("then", "else")
COMBINATIONS = ("allOf", "anyOf", "oneOf")


def _types(node):
    """The JSON types a schema node allows, in the schema's order, or () where it names none."""
    kind = node.get("type")
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list):
        return tuple(kind)
    return ()


def _branches(node, conditional=False):
    """(part, conditional) for the node and every if/then/else or allOf/anyOf/oneOf branch of it, which
    may document keys too; conditional: the part applies only sometimes (then, else, anyOf, oneOf)."""
    yield node, conditional
    for key in BRANCHES:
        if isinstance(node.get(key), dict):
            yield from _branches(node[key], True)
    for key in COMBINATIONS:
        for sub in node.get(key) or []:
            if isinstance(sub, dict):
                yield from _branches(sub, conditional or key != "allOf")


def _check_name(name, path):
    if not isinstance(name, str) or not name or any(ch in name for ch in ".<>\t\n"):
        raise ValueError(f"a key under {path or 'the top'} cannot be written as a path segment: {name!r}")


def walk(node, path=()):
    """Yield (path, types, open, enum) for every key the schema documents under `node`, depth first,
    in the schema's order. `path` is a tuple of segments; a pattern segment is "<REGEX>"."""
    properties, patterns = {}, {}
    for part, conditional in _branches(node):
        for name, sub in (part.get("properties") or {}).items():
            _check_name(name, ".".join(path))
            if name not in properties or properties[name][1] and not conditional:
                properties[name] = (sub, conditional)
        for regex, sub in (part.get("patternProperties") or {}).items():
            if "<" in regex or ">" in regex or "\t" in regex:
                raise ValueError(f"a pattern under {'.'.join(path)} cannot be written as a path segment: {regex!r}")
            if regex not in patterns or patterns[regex][1] and not conditional:
                patterns[regex] = (sub, conditional)
    for name, (sub, conditional) in properties.items():
        yield from _entry(sub, path + (name,), conditional)
    for regex, (sub, conditional) in patterns.items():
        yield from _entry(sub, path + (f"<{regex}>",), conditional)


def _entry(node, path, conditional=False):
    """A key's line, and its keys' lines. A key the schema documents only in a conditional branch (the
    `then` of an if) gets no types or enum: they hold only when the condition does."""
    if not isinstance(node, dict):
        node = {}
    parts = [part for part, _ in _branches(node)]
    types = () if conditional else _types(node)
    described = any(p.get("properties") or p.get("patternProperties") for p in parts)
    additional = [p.get("additionalProperties") for p in parts if "additionalProperties" in p]
    enum = None if conditional else node.get("enum")
    is_open = any(a is True or isinstance(a, dict) for a in additional) or (
        not described and not additional and node.get("enum") is None and "const" not in node
        and (not _types(node) or "object" in _types(node)))
    yield path, types, is_open, enum
    if not is_open:
        yield from walk(node, path)


def lines(schema):
    """The lines of the key list (without the header) for a loaded schema."""
    out = []
    for path, types, is_open, enum in walk(schema):
        flags = []
        if is_open:
            flags.append("open")
        if enum is not None:
            flags.append("enum=" + json.dumps(enum))
        out.append("\t".join([".".join(path), ",".join(types) or "-", " ".join(flags)]).rstrip("\t"))
    return out


def header(tag, commit, app_version):
    return [
        "# Documented value keys of the `jupyterhub` Helm chart (Zero to JupyterHub), one per line:",
        "# PATH<TAB>TYPES<TAB>FLAGS, as deploy/kubernetes/chart_keys.py prints them (its docstring says how to read them).",
        "# Source: https://github.com/jupyterhub/zero-to-jupyterhub-k8s, file jupyterhub/values.schema.yaml",
        f"# tag: {tag}",
        f"# commit: {commit}",
        f"# appVersion (JupyterHub in the hub image): {app_version}",
        f"# Generated by: python deploy/kubernetes/chart_keys.py values.schema.yaml --tag {tag} --commit {commit} --app-version {app_version}",
        "# (values.schema.yaml: `git show TAG:jupyterhub/values.schema.yaml` in a clone of that repository)",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print the key paths a Helm chart's values.schema.yaml documents.")
    parser.add_argument("schema", help="the chart's values.schema.yaml (or .json)")
    parser.add_argument("--tag", help="the chart's release tag, for the provenance header")
    parser.add_argument("--commit", help="the commit of that tag, for the provenance header")
    parser.add_argument("--app-version", default="?", help="the chart's appVersion (Chart.yaml), for the header")
    args = parser.parse_args(argv)
    with open(args.schema, encoding="utf-8") as fh:
        schema = yaml.safe_load(fh)
    if args.tag or args.commit:
        print("\n".join(header(args.tag or "?", args.commit or "?", args.app_version)))
    print("\n".join(lines(schema)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
