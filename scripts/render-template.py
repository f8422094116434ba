#!/usr/bin/env python3
"""render-template.py TEMPLATE VARS_JSON: print an Ansible role's Jinja2
template rendered with the variables of the JSON object VARS_JSON, as the
role's template task would render it. For the test harness, which writes
the containerd drop-in from the containerd role's own template
(scripts/containerd-config.sh). Every variable the template uses must be
given: an undefined one is an error naming it, so a variable added to the
template is a variable the harness chooses a value for."""
import json
import sys

import jinja2


def to_bool(v):
    """Ansible's bool filter."""
    if isinstance(v, str):
        return v.strip().lower() in ("yes", "on", "1", "true")
    return bool(v)


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: render-template.py TEMPLATE VARS_JSON")
    # trim_blocks as Ansible's template module has it: a block tag's line leaves no blank line.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = to_bool
    with open(argv[1]) as f:
        template = env.from_string(f.read())
    try:
        sys.stdout.write(template.render(**json.loads(argv[2])))
    except jinja2.UndefinedError as e:
        sys.exit(f"render-template.py: {argv[1]}: {e}: give it a value")


if __name__ == "__main__":
    main(sys.argv)
