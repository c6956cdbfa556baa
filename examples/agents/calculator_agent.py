#!/usr/bin/env python3
"""A black-box agent for flywheel's OpenAI-compatible endpoint (docs/agents.md).

It knows nothing of flywheel: it reads the task (the prompt record as one JSON line), talks to
OPENAI_BASE_URL with its API key as any OpenAI client would (the Python standard library's
urllib only), offers the model one tool, `calc`, runs the calls the model makes and sends their
results back, and stops at the first reply without a call: the model's answer, which the run's
rewards score. Any OpenAI SDK pointed at the same URL works the same way.

It runs either way flywheel starts agents (rollout.agent.mode):
- episode: one run per episode; the record on stdin, the key in OPENAI_API_KEY.
- persistent (FLYWHEEL_AGENT_MODE=persistent): one run for many episodes; each stdin line is
  {"episode_id", "api_key", "base_url", "record"}, and each episode ends with the line
  {"episode_id": ..., "done": true} on stdout.
"""
import json
import os
import sys
import urllib.error
import urllib.request

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression (+, -, *, /, parentheses).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}]


def chat(base_url, api_key, messages, max_tokens):
    body = json.dumps({"model": "policy", "messages": messages, "tools": TOOLS,
                       "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(
        base_url + "/chat/completions", data=body,
        headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["message"]


def calc(expression):
    if not expression or any(c not in "0123456789+-*/() " for c in expression):
        return "error: not an arithmetic expression"
    try:
        value = eval(expression, {"__builtins__": {}})  # digits and operators only
    except Exception as error:  # division by zero, a syntax error
        return "error: " + type(error).__name__
    return str(int(value)) if float(value).is_integer() else str(value)


def episode(record, base_url, api_key):
    """Runs one episode; returns None, or an error message."""
    messages = [{"role": "user", "content": record["prompt"]}]
    max_turns = int(os.environ.get("AGENT_MAX_TURNS", "2"))
    for _ in range(max_turns):
        try:
            message = chat(base_url, api_key, messages, max_tokens=24)
        except urllib.error.HTTPError as error:
            # 400 when the episode's token budget is spent: the episode is over.
            text = error.read().decode()
            return None if error.code == 400 else "HTTP %d: %s" % (error.code, text)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            break  # the answer
        for call in calls:
            arguments = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": calc(arguments.get("expression", ""))})
    return None


def main():
    if os.environ.get("FLYWHEEL_AGENT_MODE") != "persistent":
        record = json.loads(sys.stdin.readline())
        error = episode(record, os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"])
        if error:
            print(error, file=sys.stderr)
        return 1 if error else 0
    for line in sys.stdin:
        job = json.loads(line)
        try:
            error = episode(job["record"], job["base_url"], job["api_key"])
        except Exception as exception:  # one bad episode does not end the others
            error = "%s: %s" % (type(exception).__name__, exception)
        done = {"episode_id": job["episode_id"], "done": True}
        if error:
            done["error"] = error
        print(json.dumps(done), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
