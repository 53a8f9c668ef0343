"""What the AgentDojo MCP server (server.py) and its judge (judge.py) share: agentdojo 0.1.35
loaded without the LLM clients its `agent_pipeline` package imports, and one case (a suite's
user task, maybe with an injection task's attack in the vectors that task reaches) turned into
its environment.

A case is a dict: {"seq": n, "version": "v1.1.2", "suite": "banking", "user_task":
"user_task_0", "injection_task": "injection_task_1" or None, "attack": "important_instructions"}.
"""
import importlib.util
import os
import sys
import types


def _shim():
    """agentdojo/agent_pipeline/__init__.py imports every LLM client (openai, anthropic, cohere,
    google-genai); the suites need only its submodules. Register the packages without running
    their __init__, and the one constant tool_execution.py takes from google_llm."""
    if "agentdojo.agent_pipeline" in sys.modules:
        return
    root = importlib.util.find_spec("agentdojo").submodule_search_locations[0]
    for name, sub in [("agentdojo.agent_pipeline", "agent_pipeline"),
                      ("agentdojo.agent_pipeline.llms", os.path.join("agent_pipeline", "llms"))]:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, sub)]
        module.__package__ = name
        sys.modules[name] = module
    google = types.ModuleType("agentdojo.agent_pipeline.llms.google_llm")
    google.EMPTY_FUNCTION_NAME = "<empty-function-name>"
    sys.modules[google.__name__] = google


_shim()

import yaml  # noqa: E402
from ast import literal_eval  # noqa: E402

import agentdojo.task_suite.task_suite as _task_suite  # noqa: E402
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline  # noqa: E402
from agentdojo.agent_pipeline.tool_execution import is_string_list, tool_result_to_str  # noqa: E402
from agentdojo.attacks.attack_registry import load_attack  # noqa: E402
from agentdojo.functions_runtime import FunctionsRuntime  # noqa: E402
from agentdojo.task_suite.load_suites import get_suite  # noqa: E402

# libyaml's loader: the same environments, five times faster to load.
if getattr(yaml, "__with_libyaml__", False):
    _task_suite.yaml = types.SimpleNamespace(
        safe_load=lambda text: yaml.load(text, Loader=yaml.CSafeLoader), load=yaml.load, dump=yaml.dump)

# The model the attacks address by name (AgentDojo reads it from the pipeline's name).
MODEL = "claude-3-5-sonnet-20241022"

_suites = {}
_attacks = {}


def suite_of(version, name):
    key = (version, name)
    if key not in _suites:
        _suites[key] = get_suite(version, name)
    return _suites[key]


def attack_of(version, suite_name, attack):
    key = (version, suite_name, attack)
    if key not in _attacks:
        pipeline = GroundTruthPipeline(None)
        pipeline.name = MODEL
        _attacks[key] = load_attack(attack, suite_of(version, suite_name), pipeline)
    return _attacks[key]


def injections_of(case):
    """The attack's text for each vector the user task reaches (none without an injection task)."""
    if not case.get("injection_task"):
        return {}
    suite = suite_of(case["version"], case["suite"])
    attack = attack_of(case["version"], case["suite"], case["attack"])
    return attack.attack(suite.user_tasks[case["user_task"]], suite.injection_tasks[case["injection_task"]])


def environment_of(case):
    """The case's environment before any call, with the attack in its vectors."""
    suite = suite_of(case["version"], case["suite"])
    environment = suite.load_and_inject_default_environment(injections_of(case))
    return suite.user_tasks[case["user_task"]].init_environment(environment)


def call(runtime, environment, name, arguments):
    """Runs one tool as AgentDojo's ToolsExecutor does (a list written as a string is read as
    one); the result as the model reads it, and the error, if any."""
    arguments = {key: (literal_eval(value) if isinstance(value, str) and is_string_list(value) else value)
                 for key, value in arguments.items()}
    result, error = runtime.run_function(environment, name, arguments)
    return tool_result_to_str(result), error


def runtime_of(suite):
    return FunctionsRuntime(suite.tools)
