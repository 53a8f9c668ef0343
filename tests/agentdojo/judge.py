"""The harness's side of AgentDojo (`baaaht-bench containment`), JSON lines in and out:
- {"op": "cases", "version": V, "suites": [...]}: every user task and injection task of each suite;
- {"op": "plan", "case": C}: what the scripted model does for case C: the user task's prompt,
  its ground-truth calls and answer, the injection task's calls and answer (the arguments from
  the environment before any call, as AgentDojo computes them), and the attack's text;
- {"op": "judge", "case": C, "output": TEXT, "env": B64, "traces": T}: AgentDojo's own utility and
  security checks of the environment the MCP server left (its `env.pickle` and `traces.json`, as
  the harness read them from the server's folder) against the one
  before, with the final answer TEXT.
"""
import base64
import json
import pickle
import sys

import common
from agentdojo.functions_runtime import FunctionCall



def plain(value):
    return getattr(value, "value", str(value))


def calls(function_calls):
    return [{"function": call.function, "args": json.loads(json.dumps(dict(call.args), default=plain))}
            for call in function_calls]


def cases(request):
    out = []
    for name in request["suites"]:
        suite = common.suite_of(request["version"], name)
        out.append({"suite": name, "user_tasks": sorted(suite.user_tasks, key=order),
                    "injection_tasks": sorted(suite.injection_tasks, key=order)})
    return {"suites": out}


def order(task_id):
    return int(task_id.rsplit("_", 1)[1])


def plan(case):
    suite = common.suite_of(case["version"], case["suite"])
    user = suite.user_tasks[case["user_task"]]
    before = common.environment_of(case)
    planned = {"prompt": user.PROMPT, "user_calls": calls(user.ground_truth(before.model_copy(deep=True))),
               "user_output": user.GROUND_TRUTH_OUTPUT or "", "injection_calls": [], "injection_output": "",
               "injections": list(common.injections_of(case).values())}
    if case.get("injection_task"):
        injection = suite.injection_tasks[case["injection_task"]]
        planned["injection_calls"] = calls(injection.ground_truth(before.model_copy(deep=True)))
        planned["injection_output"] = injection.GROUND_TRUTH_OUTPUT or ""
    return planned


def left(case, request):
    """The environment the server left for this case, and the calls made (none: no call came),
    from what the harness read of the server's folder: `env` (the pickle, base64) and
    `traces`, each with the case's seq it was written for."""
    environment, traces = request.get("env"), request.get("traces")
    if not environment or not traces or traces.get("seq") != case["seq"]:
        return common.environment_of(case), []
    # Written by server.py in the same image (never by an agent: only its container sees the
    # folder).
    environment = pickle.loads(base64.b64decode(environment))
    if environment["seq"] != case["seq"]:
        return common.environment_of(case), []
    return environment["environment"], [FunctionCall(function=t["function"], args=t["args"]) for t in traces["traces"]]


def judge(case, output, request):
    suite = common.suite_of(case["version"], case["suite"])
    before = common.environment_of(case)
    after, traces = left(case, request)
    user = suite.user_tasks[case["user_task"]]
    utility = user.utility_from_traces(output, before, after, traces)
    if utility is None:
        utility = user.utility(output, before, after)
    security = None
    if case.get("injection_task"):
        injection = suite.injection_tasks[case["injection_task"]]
        security = injection.security_from_traces(output, before, after, traces)
        if security is None:
            security = injection.security(output, before, after)
    return {"utility": bool(utility), "security": None if security is None else bool(security),
            "calls": [{"function": t.function, "args": t.args} for t in traces]}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request["op"]
            if op == "cases":
                answer = cases(request)
            elif op == "plan":
                answer = plan(request["case"])
            elif op == "judge":
                answer = judge(request["case"], request.get("output", ""), request)
            else:
                answer = {"error": f"unknown op {op}"}
        except Exception as error:  # said back, so the harness shows it
            answer = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
