#!/usr/bin/python3
"""Optuna's TPE sampler behind a line protocol, for the search-quality benchmark (never used by
the product). Spoken to by bench/optuna_policy.cpp; run with Debian's /usr/bin/python3, which
has python3-optuna (written against Optuna 3.1).

Protocol: one JSON object per line each way, one response per request, in order, until stdin
ends (then the process exits 0). Nothing but protocol lines is ever written to stdout.

Request:
  {"space": {"knobs":   [{"name": "tp", "values": [1, 2, 4, 8]}, ...],
             "patches": ["fused_rmsnorm", ...]},
   "history": [{"config": {"knobs": {"tp": 2, ...}, "patches": ["fused_rope"]},
                "state": "ok" | "fail" | "pruned" | "pending" | "infeasible",
                "value": 3.09 | null,
                "invalid": true}, ...],
   "seed": 7,
   "n": 1,
   "constraints": false}

  space.knobs    every knob with its finite list of values (JSON types are kept: integers stay
                 int, reals float, booleans bool, choices str); each becomes a
                 CategoricalDistribution(values) named after the knob. An optional "default" is
                 accepted and ignored (TPE has no notion of a baseline).
  space.patches  patch names; each becomes CategoricalDistribution([False, True]) named
                 "patch:NAME" (True: applied).
  history        every trial so far, in order. "ok": COMPLETE with objective "value" (log step
                 time, minimized; required, finite). "fail": FAIL (value null) -- OOM, crash,
                 timeout, contract violation. "pruned": PRUNED without intermediate values
                 (value null) -- the caller uses it for a proposal its constraint check rejected
                 (marked "invalid": true; not a trial of the benchmark). "pending": RUNNING (an
                 earlier proposal of the same batch, not yet measured). "invalid" is informative
                 only. "infeasible" (only with "constraints": true): a failed trial told as
                 COMPLETE with a violated constraint (below). TPE (Optuna 3.1) models COMPLETE
                 trials and ranks PRUNED ones below every
                 COMPLETE one, so it learns to avoid their values; FAIL and RUNNING trials are
                 ignored (they change nothing but the seed, below). This is the Optuna
                 maintainers' advice for infeasible combinations (raise TrialPruned;
                 optuna/optuna#566): told as FAIL, a rejected proposal would be proposed again
                 and again once TPE has left its random start-up. A config must assign every knob
                 of the space a listed value and name only patches of the space.
  seed           non-negative integer.
  n              number of proposals (>= 0; default 1).
  constraints    (default false) TPE with Optuna's constraints_func (experimental in Optuna
                 3.x; Ozaki et al. 2022, "Multiobjective tree-structured Parzen estimator",
                 JAIR 73, section on constraints): every told trial carries one constraint value
                 in its system attributes ("constraints", Optuna's key): 0 (feasible) for "ok",
                 1 (violated) for "infeasible" and "pruned". "infeasible" trials are COMPLETE
                 with the worst "ok" value of the history (0 when there is none): TPE splits
                 feasible trials from infeasible ones first (a feasible trial always ranks
                 above an infeasible one), so the value only orders infeasible trials among
                 themselves. This is Optuna's own way to say "this configuration cannot run",
                 and its fairest use for OOMs and crashes: they count towards the start-up
                 trials and TPE's density of bad configurations.

Response:
  {"proposals": [{"knobs": {"tp": 4, ...}, "patches": ["fused_rope", ...]}, ...],
   "startup": [true, ...]}
                 n proposals (patches sorted); startup[i]: proposal i is a random start-up
                 sample (fewer than n_startup_trials = 10 complete and pruned trials were told),
                 not a TPE model choice
  {"error": "what was wrong"}   (bad request; the process keeps serving)

Semantics: stateless. Each request builds a fresh in-memory minimizing study with
TPESampler(seed=s) at Optuna's defaults (n_startup_trials=10, univariate, ...), adds the
history with create_trial/add_trial, and asks n times (each asked trial stays RUNNING, so later
asks of the same request continue the sampler's random stream). s is the SHA-256 of the seed and
the canonical JSON text of the history (sorted keys): the same seed and history always give the
same response, and any other history gives an independent draw. (A seed from (seed,
len(history)) alone would repeat draws: a re-ask after one invalid proposal and the next call
after one measured trial have histories of the same length, and during the random start-up
Optuna's draws depend on the seed only, so the two would propose the same configuration; a
seeded Optuna study never repeats its random stream like that.) Python's hash seed does not
matter (no set iteration in the path); the C++ side sets PYTHONHASHSEED=0 all the same.
"""

import hashlib
import json
import math
import sys
import traceback
import warnings

try:
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
except ImportError as e:  # the caller shows stderr in its exception
    sys.stderr.write(f"optuna_tpe.py: cannot import optuna ({e}); use /usr/bin/python3 with "
                     "python3-optuna\n")
    sys.exit(3)

optuna.logging.set_verbosity(optuna.logging.WARNING)
optuna.logging.disable_propagation()
warnings.simplefilter("ignore")  # ExperimentalWarning etc. must never reach a terminal or stdout

PATCH_PREFIX = "patch:"
N_STARTUP_TRIALS = 10  # TPESampler's default, written out because the response reports it
_STATES = {"ok": TrialState.COMPLETE, "fail": TrialState.FAIL, "pruned": TrialState.PRUNED,
           "pending": TrialState.RUNNING, "infeasible": TrialState.COMPLETE}
CONSTRAINTS_KEY = "constraints"  # optuna.samplers._base._CONSTRAINTS_KEY in Optuna 3.1


class RequestError(Exception):
    """A malformed request; answered with {"error": ...}."""


def _derived_seed(seed, history):
    """A 32-bit sampler seed (numpy RandomState's range) from the seed and the history."""
    text = json.dumps(["optuna_tpe/1", seed, history], sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def _same_type(a, b):
    # bool is a subclass of int: compare exact types so that 1 and True stay distinct.
    return type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                  and not isinstance(a, bool) and not isinstance(b, bool))


def _distributions(space):
    """Ordered {param name: CategoricalDistribution} and the knob names, from request.space."""
    if not isinstance(space, dict):
        raise RequestError("space: expected an object")
    dists = {}
    knob_names = []
    for k in space.get("knobs", []):
        name, values = k.get("name"), k.get("values")
        if not isinstance(name, str) or name.startswith(PATCH_PREFIX) or name in dists:
            raise RequestError(f"space.knobs: bad or repeated name {name!r}")
        if not isinstance(values, list) or not values:
            raise RequestError(f"space.knobs[{name}].values: expected a non-empty list")
        if any(not isinstance(v, (bool, int, float, str)) for v in values):
            raise RequestError(f"space.knobs[{name}].values: expected numbers, bools or strings")
        if len({json.dumps(v) for v in values}) != len(values):
            raise RequestError(f"space.knobs[{name}].values: repeated value")
        dists[name] = CategoricalDistribution(values)
        knob_names.append(name)
    for p in space.get("patches", []):
        if not isinstance(p, str) or PATCH_PREFIX + p in dists:
            raise RequestError(f"space.patches: bad or repeated name {p!r}")
        dists[PATCH_PREFIX + p] = CategoricalDistribution([False, True])
    return dists, knob_names


def _params(config, dists, knob_names, where):
    """Optuna params of one configuration; every knob must take a value of its list."""
    if not isinstance(config, dict):
        raise RequestError(f"{where}: expected an object")
    knobs = config.get("knobs", {})
    patches = config.get("patches", [])
    if not isinstance(knobs, dict) or not isinstance(patches, list):
        raise RequestError(f"{where}: expected knobs object and patches list")
    params = {}
    for name in knob_names:
        if name not in knobs:
            raise RequestError(f"{where}.knobs: missing {name}")
        v = knobs[name]
        choices = dists[name].choices
        if not any(_same_type(v, c) and v == c for c in choices):
            raise RequestError(f"{where}.knobs.{name}: {json.dumps(v)} is not one of "
                               f"{json.dumps(list(choices))}")
        # The listed value itself, so that 4 and 4.0 cannot pass as different params.
        params[name] = next(c for c in choices if _same_type(v, c) and v == c)
    extra = set(knobs) - set(knob_names)
    if extra:
        raise RequestError(f"{where}.knobs: not in the space: {sorted(extra)}")
    for p in patches:
        if PATCH_PREFIX + str(p) not in dists:
            raise RequestError(f"{where}.patches: {p!r} is not in the space")
    for name in dists:
        if name.startswith(PATCH_PREFIX):
            params[name] = name[len(PATCH_PREFIX):] in patches
    return params


def _config(params, knob_names):
    knobs = {name: params[name] for name in knob_names}
    patches = sorted(name[len(PATCH_PREFIX):] for name, on in params.items()
                     if name.startswith(PATCH_PREFIX) and on)
    return {"knobs": knobs, "patches": patches}


def answer(request):
    """The response object of one request object."""
    if not isinstance(request, dict):
        raise RequestError("expected a JSON object")
    dists, knob_names = _distributions(request.get("space"))
    history = request.get("history", [])
    seed = request.get("seed", 0)
    n = request.get("n", 1)
    if not isinstance(history, list):
        raise RequestError("history: expected a list")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise RequestError("seed: expected a non-negative integer")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise RequestError("n: expected a non-negative integer")
    constrained = request.get("constraints", False)
    if not isinstance(constrained, bool):
        raise RequestError("constraints: expected true or false")

    if constrained:
        ok_values = [h.get("value") for h in history
                     if isinstance(h, dict) and h.get("state") == "ok"
                     and isinstance(h.get("value"), (int, float))
                     and not isinstance(h.get("value"), bool) and math.isfinite(h.get("value"))]
        worst = max(ok_values) if ok_values else 0.0
        sampler = optuna.samplers.TPESampler(
            seed=_derived_seed(seed, history), n_startup_trials=N_STARTUP_TRIALS,
            constraints_func=lambda t: t.system_attrs.get(CONSTRAINTS_KEY, (1.0,)))
    else:
        sampler = optuna.samplers.TPESampler(seed=_derived_seed(seed, history),
                                             n_startup_trials=N_STARTUP_TRIALS)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for i, h in enumerate(history):
        where = f"history[{i}]"
        if not isinstance(h, dict) or h.get("state") not in _STATES:
            raise RequestError(f"{where}.state: expected one of {sorted(_STATES)}")
        if h["state"] == "infeasible" and not constrained:
            raise RequestError(f"{where}.state: \"infeasible\" needs \"constraints\": true")
        state = _STATES[h["state"]]
        value = h.get("value")
        if h["state"] == "infeasible":
            value = worst
        elif state == TrialState.COMPLETE:
            if (not isinstance(value, (int, float)) or isinstance(value, bool)
                    or not math.isfinite(value)):
                raise RequestError(f"{where}.value: expected a finite number for state ok")
        else:
            value = None
        params = _params(h.get("config"), dists, knob_names, where + ".config")
        system_attrs = None
        if constrained and state != TrialState.RUNNING:
            system_attrs = {CONSTRAINTS_KEY: (0.0 if h["state"] == "ok" else 1.0,)}
        study.add_trial(optuna.trial.create_trial(state=state, value=value, params=params,
                                                  distributions=dists,
                                                  system_attrs=system_attrs))
    told = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials)
    proposals = []
    for _ in range(n):  # asked trials stay RUNNING: `told` does not change
        trial = study.ask(fixed_distributions=dists)
        proposals.append(_config(trial.params, knob_names))
    return {"proposals": proposals, "startup": [told < N_STARTUP_TRIALS] * n}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            response = answer(json.loads(line))
        except (RequestError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            response = {"error": str(e)}
        except Exception:  # an Optuna failure: say what, keep serving
            response = {"error": "optuna failed: "
                        + traceback.format_exc(limit=3).strip().replace("\n", " | ")}
        sys.stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
