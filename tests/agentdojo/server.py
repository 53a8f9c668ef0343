"""An AgentDojo suite's environment as a stdio MCP server (the `mcp` SDK's low-level server):
`python3 server.py SUITE`. Its tools are the suite's, with their JSON schemas and the MCP
annotations a careful server would give them (annotations.json: which only read). The case it
plays is the one `$MCP_STATE_DIR/case.json` names when a call comes (the harness writes it
before each turn; a new `seq` starts a fresh environment with the attack in its vectors). After
each call the environment and the calls so far are written beside it (env.pickle, traces.json,
atomically) for the judge.
"""
import json
import os
import pickle
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

import common

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.environ.get("MCP_STATE_DIR", "/state")
SUITE = sys.argv[1]
VERSION = sys.argv[2] if len(sys.argv) > 2 else "v1.1.2"

suite = common.suite_of(VERSION, SUITE)
runtime = common.runtime_of(suite)
with open(os.path.join(HERE, "annotations.json")) as file:
    ANNOTATIONS = json.load(file)[SUITE]

playing = {"seq": None, "environment": None, "traces": []}


def write(name, data):
    path = os.path.join(STATE, name)
    with open(path + ".tmp", "wb" if isinstance(data, bytes) else "w") as file:
        file.write(data)
    os.replace(path + ".tmp", path)


def current():
    """The environment of the case case.json names, fresh when it is a new one."""
    with open(os.path.join(STATE, "case.json")) as file:
        case = json.load(file)
    if case["suite"] != SUITE:
        raise RuntimeError(f"case.json names the suite {case['suite']}, this server plays {SUITE}")
    if case["seq"] != playing["seq"]:
        playing.update(seq=case["seq"], environment=common.environment_of(case), traces=[])
    return playing


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[
        types.Tool(name=function.name, description=function.description,
                   input_schema=function.parameters.model_json_schema(),
                   annotations=types.ToolAnnotations(**ANNOTATIONS[function.name]))
        for function in suite.tools])


async def call_tool(ctx, params: types.CallToolRequestParams):
    try:
        state = current()
    except Exception as error:  # the harness's mistake, said as the call's error
        return types.CallToolResult(content=[types.TextContent(text=f"no case: {error}")], is_error=True)
    arguments = params.arguments or {}
    state["traces"].append({"function": params.name, "args": arguments})
    text, error = common.call(runtime, state["environment"], params.name, arguments)
    # Pickled: a JSON round trip does not give AgentDojo's checks the same environment back.
    write("env.pickle", pickle.dumps({"seq": state["seq"], "environment": state["environment"]}))
    write("traces.json", json.dumps({"seq": state["seq"], "traces": state["traces"]}))
    if error:
        return types.CallToolResult(content=[types.TextContent(text=error)], is_error=True)
    return types.CallToolResult(content=[types.TextContent(text=text)])


server = Server(f"agentdojo-{SUITE}", version="0.1.35", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write_stream):
        await server.run(read, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
