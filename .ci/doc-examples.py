#!/usr/bin/env python3
"""Every item of the public facade has an example (issue 14: `cargo doc` shows every
public item with one). Reads rustdoc's JSON (`cargo rustdoc --lib -- -Z unstable-options
--output-format json`) and lists each public item reachable from the crate root, and each
visible inherent method of those types, whose docs have no code block. Items under the
hidden `internals` module and `#[doc(hidden)]` items are not the facade and are skipped."""
import json
import sys

doc = json.load(open(sys.argv[1]))
index = doc["index"]
missing = []
seen = set()
checked = set()


def hidden(item):
    return any("doc(hidden)" in str(a) for a in item.get("attrs", []))


def has_example(item):
    return "```" in (item.get("docs") or "")


def check(item_id, path):
    if item_id in seen or str(item_id) not in index:
        return
    seen.add(item_id)
    item = index[str(item_id)]
    if hidden(item):
        return
    inner = item["inner"]
    kind = next(iter(inner))
    name = item.get("name") or ""
    here = f"{path}::{name}" if name else path
    if kind == "use":
        target = inner["use"].get("id")
        if target is not None:
            check(target, path)
        return
    if kind == "module":
        if name == "internals":
            return
        if path and not has_example(item):
            missing.append(here)
        for child in inner["module"]["items"]:
            check(child, here)
        return
    if kind in ("struct", "enum", "trait", "function", "type_alias", "constant"):
        checked.add(here)
        if not has_example(item):
            missing.append(here)
    impls = inner.get(kind, {}).get("impls", []) if isinstance(inner.get(kind), dict) else []
    for impl_id in impls:
        impl = index.get(str(impl_id))
        if impl is None or impl["inner"]["impl"].get("trait") is not None:
            continue
        if impl["inner"]["impl"].get("is_synthetic") or impl["inner"]["impl"].get("blanket_impl"):
            continue
        for method_id in impl["inner"]["impl"]["items"]:
            method = index.get(str(method_id))
            if method is None or hidden(method):
                continue
            checked.add(f"{here}::{method['name']}")
            if not has_example(method):
                missing.append(f"{here}::{method['name']}")
    if kind == "trait":
        for method_id in inner["trait"]["items"]:
            method = index.get(str(method_id))
            if method is not None and not hidden(method) and "function" in method["inner"]:
                if not has_example(method):
                    missing.append(f"{here}::{method['name']}")


check(doc["root"], "")
# The check must see the facade: a JSON layout it does not understand is a failure, not
# a pass.
for expected in ("Store", "Store::open", "Session::append", "StoreOptions::durability"):
    if not any(c.endswith("surfacelog::" + expected) for c in checked):
        print(f"the check did not find {expected}: fix .ci/doc-examples.py", file=sys.stderr)
        sys.exit(2)
print(f"{len(checked)} public items checked", file=sys.stderr)
for entry in sorted(set(missing)):
    print(f"no example: {entry}")
print(f"{len(set(missing))} public items without an example", file=sys.stderr)
sys.exit(1 if missing else 0)
