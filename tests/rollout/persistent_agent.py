#!/usr/bin/env python3
"""A persistent agent for agent_runner_test (rollout.agent.mode: persistent): one run takes
episode after episode from stdin. Each record's "prompt" says what to do:
  "2*3="   a chat with a calc tool call, then the answer; done with reward 0.5
  "fail"   done with an error
  "crash"  exits 3 in the middle of the episode (no done line)
  "hang"   never answers (the episode's deadline kills it)
Each done line carries this run's pid, so the test can count the runs that served episodes.
"""
import json
import os
import sys
import time
import urllib.request

TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "arithmetic",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]


def chat(job, messages):
    body = json.dumps({"messages": messages, "tools": TOOLS, "max_tokens": 24}).encode()
    request = urllib.request.Request(job["base_url"] + "/chat/completions", data=body, headers={
        "Authorization": "Bearer " + job["api_key"], "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]


def main():
    assert os.environ["FLYWHEEL_AGENT_MODE"] == "persistent"
    assert os.environ["OPENAI_BASE_URL"].endswith("/v1")
    for line in sys.stdin:
        job = json.loads(line)
        prompt = job["record"]["prompt"]
        done = {"episode_id": job["episode_id"], "done": True, "pid": os.getpid()}
        if prompt == "crash":
            sys.exit(3)
        elif prompt == "hang":
            time.sleep(600)
        elif prompt == "fail":
            done["error"] = "the task made no sense"
        else:
            messages = [{"role": "user", "content": prompt}]
            message = chat(job, messages)
            call = message["tool_calls"][0]
            messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "6"}]
            answer = chat(job, messages)
            done["reward"] = 0.5 if answer["content"] == "6" else 0.0
        print("a line that is not JSON")
        print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
