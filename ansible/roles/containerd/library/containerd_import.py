#!/usr/bin/python3
# Part of Rekindle's ansible/ (role containerd). See DOCUMENTATION.
"""Ansible module: make an existing containerd configuration import a drop-in."""

DOCUMENTATION = r"""
---
module: containerd_import
short_description: Import a drop-in from an existing containerd configuration, or refuse
description:
  - Reads containerd's main configuration and every file it imports, the way containerd 2.3
    loads them (breadth first, globs in lexical order, each file's values overriding the
    files read before it), and checks that the settings the drop-in will carry can take
    effect without overriding a choice made there. Then adds the drop-in to the main
    configuration's top-level C(imports) list, editing only that line (or adding one after
    C(version)); every other byte of the file stays.
  - Fails, changing nothing, on a file that is not a version 3 or 4 configuration, a file
    that does not parse, an import that does not exist, or a setting that conflicts.
  - A missing main configuration, or one written by Rekindle (a line holding one of
    I(owned_markers)), is left to the caller, which writes a whole one.
options:
  path: {description: containerd's main configuration file., type: path, required: true}
  import_path: {description: The drop-in, an absolute path., type: path, required: true}
  settings:
    description:
      - What the drop-in sets. Each item has C(key) (a list of TOML key segments), C(value)
        (the drop-in's value; none for a setting the drop-in leaves alone), C(allowed)
        (other values that are no conflict, such as containerd's default), C(subset) (a
        list value is no conflict when it holds only items of C(value)), C(duration) (compare
        as Go durations), C(fix) (what to do about a conflict).
    type: list
    elements: dict
    default: []
  owned_markers: {description: Text that marks a configuration Rekindle wrote (in its first five lines)., type: list, elements: str, default: []}
  inspect_only: {description: Check and report; never write., type: bool, default: false}
  backup: {description: Keep a timestamped copy of the file before editing it., type: bool, default: false}
"""

RETURN = r"""
state: {description: "absent, rekindle (written by Rekindle) or foreign.", type: str, returned: always}
imported: {description: Whether the drop-in is read already., type: bool, returned: always}
files: {description: The files read, in containerd's order, the drop-in included., type: list, returned: always}
"""

import copy
import fnmatch
import glob
import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

# Configuration versions whose keys the settings are written for: 3
# (containerd 2.0 to 2.2) and 4 (2.3) differ only in the server sections.
VERSIONS = (3, 4)


class Refusal(Exception):
    pass


def key_text(key):
    return ".".join("'%s'" % k if "." in k or not k else k for k in key)


def lookup(data, key):
    for k in key:
        if not isinstance(data, dict) or k not in data:
            return False, None
        data = data[k]
    return True, data


def duration(text):
    """Seconds in a Go duration string, or None."""
    units = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d*)?)(ns|us|\u00b5s|ms|s|m|h)", str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text):
        return None
    return sum(float(n) * units[u] for n, u in parts)


def same(a, b, as_duration):
    if as_duration and duration(a) is not None and duration(b) is not None:
        return duration(a) == duration(b)
    return a == b


def glob_match(pattern, path):
    """filepath.Match, one path element at a time: '*' stops at '/'."""
    p, f = pattern.split("/"), path.split("/")
    return len(p) == len(f) and all(fnmatch.fnmatchcase(b, a) for a, b in zip(p, f))


def resolve(parent, entry, ours):
    """containerd's resolveImports for one entry, ours counted as present."""
    path = os.path.normpath(entry)
    if not os.path.isabs(path):
        path = os.path.join(os.path.dirname(parent), path)
    if "*" not in path:
        return [path]
    found = set(glob.glob(path, include_hidden=True))
    if glob_match(path, ours):
        found.add(ours)
    return sorted(found)


def load(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
        return raw, text, tomllib.loads(text)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise Refusal("%s cannot be read as TOML: %s. Fix the file, then run the playbook again." % (path, e))


def check_version(path, data):
    version = data.get("version", 0)
    if version in VERSIONS:
        return
    if isinstance(version, int) and version > max(VERSIONS):
        raise Refusal(
            "%s is a version %s containerd configuration, newer than containerd 2.3 reads. "
            "Write it as version 4, then run the playbook again." % (path, version))
    raise Refusal(
        "%s is a version %s containerd configuration (%s); containerd 2.3 would migrate it on "
        "every start, and Rekindle's settings are written for versions 3 and 4. Migrate it once: "
        "`containerd --config %s config migrate > new.toml` with Rekindle's containerd, review "
        "new.toml, put it in place of %s, then run the playbook again."
        % (path, version, "no version line" if "version" not in data else "containerd 1.x format",
           path, path))


def read_chain(main, main_data, ours, extra):
    """The files containerd reads, in order: (path, data); data None for ours.
    extra: entries appended to the main file's imports."""
    order, seen = [], set()
    queue = [main]
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if path == main:
            data, imports = main_data, main_data.get("imports", []) + extra
        elif path == ours:
            order.append((path, None))
            continue
        else:
            if not os.path.exists(path):
                raise Refusal(
                    "%s is imported but does not exist: containerd would not start. Create it or "
                    "drop it from its imports, then run the playbook again." % path)
            data = load(path)[2]
            check_version(path, data)
            imports = data.get("imports", [])
        if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
            raise Refusal("%s: imports is not a list of paths." % path)
        order.append((path, data))
        for entry in imports:
            queue.extend(resolve(path, entry, ours))
    return order


def conflicts(order, settings):
    found = []
    names = [p for p, _ in order]
    ours_at = next((i for i, (_, d) in enumerate(order) if d is None), len(order))
    for s in settings:
        key, want = s["key"], s.get("value")
        allowed = s.get("allowed") or []
        for i, (path, data) in enumerate(order):
            if data is None:
                continue
            present, have = lookup(data, key)
            if not present:
                continue
            if want is not None and same(have, want, s.get("duration")):
                continue
            after = i > ours_at and want is not None
            if not after and any(same(have, a, s.get("duration")) for a in allowed):
                continue
            if (not after and s.get("subset") and isinstance(have, list) and isinstance(want, list)
                    and all(h in want for h in have)):
                continue
            where = " (read after Rekindle's drop-in, so it would win)" if after else ""
            need = ("Rekindle needs %s" % json.dumps(want)) if want is not None else \
                "Rekindle needs %s" % " or ".join(json.dumps(a) for a in allowed)
            found.append("%s%s sets %s = %s; %s. %s" % (
                path, where, key_text(key), json.dumps(have), need, s.get("fix", "")))
    return found, names


def add_import(text, data, ours):
    """text with ours appended to its top-level imports, or None."""
    lines = text.splitlines(keepends=True)
    top = []
    for i, line in enumerate(lines):
        if re.match(r"\s*\[", line):
            break
        top.append(i)
    start = next((i for i in top if re.match(r"\s*imports\s*=", lines[i])), None)
    if start is not None:
        end = None
        for j in range(start + 1, len(lines) + 1):
            try:
                if "imports" in tomllib.loads("".join(lines[start:j])):
                    end = j
                    break
            except tomllib.TOMLDecodeError:
                continue
        if end is None:
            return None
        last = lines[end - 1]
        suffix = last[last.rfind("]") + 1:] if "]" in last else "\n"
        if not suffix.endswith("\n"):
            suffix += "\n"
        indent = re.match(r"\s*", lines[start]).group(0)
        entries = list(data.get("imports", [])) + [ours]
        new = "%simports = [%s]%s" % (indent, ", ".join(json.dumps(e) for e in entries), suffix)
        lines[start:end] = [new]
    else:
        at = next((i for i in top if re.match(r"\s*version\s*=", lines[i])), None)
        if at is None:
            return None
        eol = "\r\n" if lines[at].endswith("\r\n") else "\n"
        if not lines[at].endswith("\n"):
            lines[at] += eol
        lines.insert(at + 1, "imports = [%s]%s" % (json.dumps(ours), eol))
    new_text = "".join(lines)
    want = copy.deepcopy(data)
    want["imports"] = list(data.get("imports", [])) + [ours]
    try:
        if tomllib.loads(new_text) != want:
            return None
    except tomllib.TOMLDecodeError:
        return None
    return new_text


def run(module):
    p = module.params
    path, ours = os.path.normpath(p["path"]), os.path.normpath(p["import_path"])
    result = dict(changed=False, state="absent", imported=False, files=[])
    if not os.path.isabs(ours):
        raise Refusal("import_path must be absolute: %s" % ours)
    if not os.path.exists(path):
        return result
    raw, text, data = None, None, None
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Refusal("%s cannot be read: %s" % (path, e))
    head = b"\n".join(raw.splitlines()[:5])
    if any(m.encode() in head for m in p["owned_markers"]):
        result["state"] = "rekindle"
        return result
    result["state"] = "foreign"
    _, text, data = load(path)
    check_version(path, data)

    order = read_chain(path, data, ours, [])
    result["imported"] = any(p == ours for p, _ in order)
    if not result["imported"]:
        order = read_chain(path, data, ours, [ours])
    found, names = conflicts(order, p["settings"])
    result["files"] = names
    if found:
        others = [n for n in names if n not in (path, ours)]
        raise Refusal(
            "Rekindle's containerd settings (%s) cannot be merged into %s%s. Nothing was "
            "changed.\n- %s"
            % (ours, path, " (read with %s)" % ", ".join(others) if others else "",
               "\n- ".join(found)))
    if result["imported"]:
        return result

    new_text = add_import(text, data, ours)
    if new_text is None:
        raise Refusal(
            "%s: cannot add %s to its top-level imports list by editing that one line. Add it "
            "by hand (imports = [..., \"%s\"]), then run the playbook again." % (path, ours, ours))
    result["changed"] = True
    if module._diff:
        result["diff"] = dict(before=text, after=new_text, before_header=path, after_header=path)
    if p["inspect_only"] or module.check_mode:
        return result
    if p["backup"]:
        result["backup_file"] = module.backup_local(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".rekindle-")
    with os.fdopen(fd, "wb") as f:
        f.write(new_text.encode("utf-8"))
    module.atomic_move(tmp, path)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            import_path=dict(type="path", required=True),
            settings=dict(type="list", elements="dict", default=[]),
            owned_markers=dict(type="list", elements="str", default=[]),
            inspect_only=dict(type="bool", default=False),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    if tomllib is None:
        module.fail_json(msg="containerd_import needs Python 3.11 or newer on the host (tomllib)")
    try:
        module.exit_json(**run(module))
    except Refusal as e:
        module.fail_json(msg=str(e))


if __name__ == "__main__":
    main()
