"""Run by Debian's /usr/bin/python3 (the only interpreter that sees python3-gfal2), never imported by the operator:
one operation on a gsiftp:// endpoint through gfal2 with its GridFTP plugin (Debian gfal2-plugin-gridftp), the
credential and CA directory from the environment (X509_USER_PROXY or X509_USER_CERT/KEY, X509_CERT_DIR).

stdin: JSON {op: stat|checksum|mkdir|list|unlink|rmdir, url}; stdout: JSON {ok, code, error, ...}: stat gives size
and is_dir, checksum the adler32, list the entries {name, is_dir}."""

import json
import stat
import sys
from typing import Any


def main() -> None:
    req = json.load(sys.stdin)
    try:
        import gfal2
    except ImportError as e:
        json.dump({"ok": False, "code": None, "error": f"gfal2 is not installed ({e}): install python3-gfal2 and "
                                                       "gfal2-plugin-gridftp"}, sys.stdout)
        return
    ctx = gfal2.creat_context()
    url, op = req["url"], req["op"]
    out: dict[str, Any] = {"ok": True, "code": 0, "error": None}
    try:
        if op == "stat":
            st = ctx.stat(url)
            out.update(size=st.st_size, is_dir=stat.S_ISDIR(st.st_mode))
        elif op == "checksum":
            out["checksum"] = ctx.checksum(url, "ADLER32")
        elif op == "mkdir":
            ctx.mkdir_rec(url, 0o755)
        elif op == "list":
            entries = []
            for name in ctx.listdir(url):
                if name in (".", "..") or "/" in name:
                    continue
                st = ctx.stat(url.rstrip("/") + "/" + name)
                entries.append({"name": name, "is_dir": stat.S_ISDIR(st.st_mode)})
            out["entries"] = entries
        elif op == "unlink":
            ctx.unlink(url)
        elif op == "rmdir":
            ctx.rmdir(url)
        else:
            out = {"ok": False, "code": None, "error": f"unknown operation {op!r}"}
    except gfal2.GError as e:
        out = {"ok": False, "code": e.code, "error": " ".join(e.message.split())}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
