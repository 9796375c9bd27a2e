"""One third-party copy by gfal2 (Debian python3-gfal2 with gfal2-plugin-http), as FTS would ask for it: pull mode
only (no streaming through this client, no fallback), a bearer token per endpoint, adler32 compared at both ends.
Runs under Debian's /usr/bin/python3 (the only interpreter that sees gfal2), so it imports nothing of tpcmesh.

stdin: JSON {source, destination, source_token, destination_token, checksum ("both" or "none"), streams,
timeout}; stdout: JSON {ok, error, checksum (the source's, as gfal2 got it)}."""

import json
import sys

import gfal2


def main() -> None:
    req = json.load(sys.stdin)
    ctx = gfal2.creat_context()
    ctx.set_opt_string("HTTP PLUGIN", "DEFAULT_COPY_MODE", "3rd pull")
    ctx.set_opt_boolean("HTTP PLUGIN", "ENABLE_STREAM_COPY", False)
    ctx.set_opt_boolean("HTTP PLUGIN", "ENABLE_FALLBACK_TPC_COPY", False)
    ctx.set_opt_boolean("HTTP PLUGIN", "RETRIEVE_BEARER_TOKEN", False)  # no macaroon requests: the tokens given
    for url, token in ((req["source"], req["source_token"]), (req["destination"], req["destination_token"])):
        if token:
            ctx.cred_set(url, gfal2.cred_new("BEARER", token))
    params = ctx.transfer_parameters()
    params.overwrite = True
    params.nbstreams = int(req.get("streams", 1))
    params.timeout = int(req.get("timeout", 60))
    if req.get("checksum", "both") == "both":
        params.checksum_check = True
        params.set_checksum(gfal2.checksum_mode.both, "ADLER32", "")
    out = {"ok": False, "error": None, "checksum": None}
    try:
        ctx.filecopy(params, req["source"], req["destination"])
        out["ok"] = True
        if req.get("checksum", "both") == "both":
            out["checksum"] = ctx.checksum(req["source"], "ADLER32")
    except gfal2.GError as e:
        out["error"] = f"{e.message} (code {e.code})"
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
