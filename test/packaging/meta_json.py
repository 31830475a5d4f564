#!/usr/bin/env python3
"""test/packaging/meta_json.py: validate META.json for PGXN.

Checks META.json against the PGXN Meta Spec 1.0.0 (https://pgxn.org/spec/:
required keys, the shape and value of each key, semantic versions, version
ranges of prerequisites, no unknown keys but x_/X_ ones), then against this
repository: the version is leader_election.control's default_version, the
files it names exist, and the PostgreSQL prerequisite is the oldest major
test/all.sh runs.  Prints one line per check and "N passed, N failed".
"""
import json
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok - {what}")
    else:
        failed += 1
        print(f"not ok - {what}" + (f": {detail}" if detail else ""))


# Semantic Versioning 1.0.0, as PGXN uses it.
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)([a-zA-Z][0-9a-zA-Z-]*)?$")
# A version range: 0, a version, or comma-separated "op version" clauses.
RANGE_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)?\s*(\S+)\s*$")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd",
    "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit",
    "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay",
    "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown",
}
TOP = {"name", "abstract", "description", "version", "maintainer", "license", "provides",
       "prereqs", "release_status", "resources", "no_index", "tags", "generated_by", "meta-spec"}


def valid_range(spec):
    if spec == 0 or spec == "0":
        return True
    if not isinstance(spec, str):
        return False
    for clause in spec.split(","):
        m = RANGE_CLAUSE.match(clause)
        if not m or not SEMVER.match(m.group(2)):
            return False
    return True


def is_str(v):
    return isinstance(v, str) and v.strip() != ""


def main():
    path = os.path.join(ROOT, "META.json")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        check("META.json is readable JSON", False, str(e))
        return
    check("META.json is readable JSON", isinstance(meta, dict))

    # ---- the spec ----
    for key in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
        check(f"required key {key}", key in meta)
    unknown = [k for k in meta if k not in TOP and not re.match(r"^[xX]_", k)]
    check("no unknown top-level keys", not unknown, ", ".join(unknown))
    name = meta.get("name", "")
    check("name: at least two characters, no whitespace, / \\ or :",
          is_str(name) and len(name) >= 2 and not re.search(r"[\s/\\:]", name), repr(name))
    check("version is a semantic version", isinstance(meta.get("version"), str)
          and bool(SEMVER.match(meta["version"])), repr(meta.get("version")))
    check("abstract is a string", is_str(meta.get("abstract")))
    m = meta.get("maintainer")
    check("maintainer is a string or a list of strings",
          is_str(m) or (isinstance(m, list) and m and all(is_str(x) for x in m)))
    lic = meta.get("license")
    check("license is known, a {name: URL} map or a list of them",
          (isinstance(lic, str) and lic in LICENSES)
          or (isinstance(lic, dict) and lic and all(is_str(v) for v in lic.values()))
          or (isinstance(lic, list) and lic and all(isinstance(x, str) and x in LICENSES for x in lic)),
          repr(lic))
    provides = meta.get("provides", {})
    check("provides is a non-empty map", isinstance(provides, dict) and provides)
    for ext, p in (provides.items() if isinstance(provides, dict) else []):
        check(f"provides.{ext}: file and version", isinstance(p, dict) and is_str(p.get("file"))
              and isinstance(p.get("version"), str) and bool(SEMVER.match(p["version"])), repr(p))
        extra = [k for k in p if k not in ("file", "version", "abstract", "docfile")
                 and not re.match(r"^[xX]_", k)]
        check(f"provides.{ext}: no unknown keys", not extra, ", ".join(extra))
    prereqs = meta.get("prereqs", {})
    ok = isinstance(prereqs, dict)
    for phase, rels in (prereqs.items() if ok else []):
        ok = ok and phase in ("configure", "build", "runtime", "test", "develop") and isinstance(rels, dict)
        for rel, deps in (rels.items() if isinstance(rels, dict) else []):
            ok = ok and rel in ("requires", "recommends", "suggests", "conflicts") and isinstance(deps, dict)
            for dep, spec in (deps.items() if isinstance(deps, dict) else []):
                if not valid_range(spec):
                    ok = False
                    print(f"#   bad version range for {phase}.{rel}.{dep}: {spec!r}")
    check("prereqs: phases, relations and version ranges", ok)
    check("release_status is stable, testing or unstable",
          meta.get("release_status", "stable") in ("stable", "testing", "unstable"))
    res = meta.get("resources", {})
    check("resources has only homepage, bugtracker, repository",
          isinstance(res, dict) and all(k in ("homepage", "bugtracker", "repository")
                                        or re.match(r"^[xX]_", k) for k in res))
    check("tags is a list of strings", all(is_str(t) and len(t) < 256 for t in meta.get("tags", [])))
    ms = meta.get("meta-spec", {})
    check("meta-spec.version is 1.0.0", isinstance(ms, dict) and ms.get("version") == "1.0.0")

    # ---- this repository ----
    with open(os.path.join(ROOT, "leader_election.control"), encoding="utf-8") as f:
        control = f.read()
    dv = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.M)
    dv = dv.group(1) if dv else None
    semver_dv = dv + ".0" * (2 - dv.count(".")) if dv else None
    check("name is the extension's", name == "leader_election", name)
    check(f"version is default_version {dv} ({semver_dv})", meta.get("version") == semver_dv,
          meta.get("version"))
    ext = provides.get("leader_election", {}) if isinstance(provides, dict) else {}
    check("provides.leader_election.version is default_version", ext.get("version") == semver_dv)
    for key in ("file", "docfile"):
        if key in ext:
            check(f"provides.leader_election.{key} exists", os.path.isfile(os.path.join(ROOT, ext[key])),
                  ext[key])
    with open(os.path.join(ROOT, "test", "all.sh"), encoding="utf-8") as f:
        majors = re.search(r"LE_PG_MAJORS:-([0-9 ]+)\}", f.read())
    oldest = min(int(x) for x in majors.group(1).split()) if majors else None
    pg = meta.get("prereqs", {}).get("runtime", {}).get("requires", {}).get("PostgreSQL")
    check(f"runtime prerequisite PostgreSQL is the oldest major tested ({oldest})",
          pg == f"{oldest}.0.0", repr(pg))


main()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
