#!/usr/bin/env python3
"""The agent of agent_runner_test: speaks to the endpoint over real HTTP (urllib, sockets) and
checks every answer against the OpenAI API's shapes; exits 1 naming the first failed check.

Episode .0: the protocol checks, then a two-turn chat with a tool call (the second streamed).
Episode .1: /v1/completions, then a rewritten history (refused: on_rewrite drop).
Episode .2: a stream the client drops mid-way, then the same request again.
With AGENT_EXPECT=429: a saturated engine's answer; with AGENT_EXPECT=segment: a rewritten
history answered from a new segment (on_rewrite segment).
The scripted policy (the test's logits processor) answers "2*3=" with <calc>2*3</calc>, a
<result> with 6, and anything with LONG in it with a's until max_tokens.
"""
import json
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
EPISODE = os.environ["FLYWHEEL_EPISODE_ID"]
REPORT = os.environ["AGENT_REPORT"] + "." + EPISODE.rsplit(".", 1)[1]
TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "arithmetic",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]
report = {}


def check(ok, what):
    if not ok:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)


def post(path, body, key=KEY, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(BASE + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), error.headers


def error_of(status, body, code, word):
    check(status == code, "expected HTTP %d, got %d: %s" % (code, status, body))
    error = json.loads(body)["error"]
    check(isinstance(error["message"], str) and word in error["message"],
          "the error should name %r: %s" % (word, body))
    check("type" in error and "code" in error and "param" in error, "error shape: " + body)


def sse(body):
    events = [line[6:] for line in body.split("\n") if line.startswith("data: ")]
    check(events and events[-1] == "[DONE]", "a stream ends with [DONE]: " + body)
    return [json.loads(e) for e in events[:-1]]


def protocol_checks():
    request = urllib.request.Request(BASE + "/models", headers={"Authorization": "Bearer " + KEY})
    with urllib.request.urlopen(request) as response:
        models = json.load(response)
    check(models["object"] == "list" and models["data"][0]["object"] == "model", str(models))
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    error_of(*post("/chat/completions", chat, key="wrong")[:2], 401, "key")
    error_of(*post("/chat/completions", chat, key=None)[:2], 401, "key")
    error_of(*post("/nowhere", chat)[:2], 404, "nowhere")
    error_of(*post("/chat/completions", None, raw=b"{not json")[:2], 400, "not JSON")
    error_of(*post("/chat/completions", {"model": "x"})[:2], 400, "messages")
    error_of(*post("/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})[:2],
             400, "messages[0].role")
    for field, value in [("temperature", 5), ("top_p", 0), ("n", 0), ("max_tokens", 0),
                         ("presence_penalty", 1), ("stop", ["a", "b", "c", "d", "e"]),
                         ("tool_choice", "required"), ("top_logprobs", 3), ("seed", "x"),
                         ("stream", "yes"), ("logit_bias", {"5": 1})]:
        body = dict(chat)
        body[field] = value
        error_of(*post("/chat/completions", body)[:2], 400, field)
    error_of(*post("/chat/completions", {"messages": [{"role": "tool", "content": "x"}]})[:2],
             400, "tool_call_id")
    error_of(*post("/completions", {"prompt": 5})[:2], 400, "prompt")
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * 70000 + b'"}]}'
    error_of(*post("/chat/completions", None, raw=big)[:2], 413, "max_request_bytes")


def episode_0():
    protocol_checks()
    messages = [{"role": "user", "content": "2*3="}]
    status, body, _ = post("/chat/completions", {
        "model": "anything", "messages": messages, "tools": TOOLS, "tool_choice": "auto",
        "temperature": 1.0, "top_p": 1.0, "max_tokens": 24, "seed": 3, "n": 1,
        "logprobs": True, "top_logprobs": 2, "presence_penalty": 0, "an_unknown_field": 1})
    check(status == 200, body)
    first = json.loads(body)
    check(first["id"].startswith("chatcmpl-") and first["object"] == "chat.completion", body)
    check(first["model"] == "anything" and isinstance(first["created"], int), body)
    choice = first["choices"][0]
    message = choice["message"]
    check(choice["finish_reason"] == "tool_calls" and message["role"] == "assistant", body)
    call = message["tool_calls"][0]
    check(call["type"] == "function" and call["function"]["name"] == "calc", body)
    check(json.loads(call["function"]["arguments"]) == {"expression": "2*3"}, body)
    content = choice["logprobs"]["content"]
    usage = first["usage"]
    check(len(content) == usage["completion_tokens"], "one logprob per token: " + body)
    check(all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 2 for t in content), body)
    check(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], body)
    report["usage"] = [usage]
    report["logprobs"] = [t["logprob"] for t in content]
    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "6"}]
    status, body, headers = post("/chat/completions", {
        "messages": messages, "tools": TOOLS, "stream": True, "max_completion_tokens": 8,
        "stream_options": {"include_usage": True}})
    check(status == 200 and headers["Content-Type"].startswith("text/event-stream"), body)
    chunks = sse(body)
    check(all(c["object"] == "chat.completion.chunk" for c in chunks), body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    check(text == "6" and finish[-1] == "stop", body)
    check(chunks[-1]["choices"] == [] and "usage" in chunks[-1], body)
    report["usage"].append(chunks[-1]["usage"])
    print(json.dumps({"note": "not the last line"}))
    print(json.dumps({"reward": 0.75}))


def episode_1():
    status, body, _ = post("/completions", {"prompt": "2*3=", "max_tokens": 20, "logprobs": 1})
    check(status == 200, body)
    first = json.loads(body)
    choice = first["choices"][0]
    check(first["object"] == "text_completion" and choice["text"] == "<calc>2*3</calc>", body)
    check(len(choice["logprobs"]["tokens"]) == first["usage"]["completion_tokens"], body)
    status, body, _ = post("/completions", {
        "prompt": "2*3=" + choice["text"] + "<result>6</result>", "max_tokens": 4,
        "stream": True})
    check(status == 200, body)
    text = "".join(c["choices"][0]["text"] for c in sse(body))
    check(text == "6", body)
    report["texts"] = [choice["text"], text]
    with open(REPORT, "w") as f:
        json.dump(report, f)
    # History rewritten: refused under on_rewrite drop, and the episode ends.
    status, body, _ = post("/completions", {"prompt": "7*7=", "max_tokens": 4})
    error_of(status, body, 400, "rewrites")


def episode_2():
    # A stream the client drops after its first event.
    url = urllib.parse.urlparse(BASE)
    body = json.dumps({"prompt": "LONG", "max_tokens": 400, "stream": True}).encode()
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                 KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.settimeout(30)
    received = b""
    while b"data: " not in received:
        chunk = sock.recv(4096)
        check(chunk, "the stream starts")
        received += chunk
    sock.close()
    status, body, _ = post("/completions", {"prompt": "LONG", "max_tokens": 3})
    check(status == 200 and json.loads(body)["choices"][0]["text"] == "aaa", body)


def saturated():
    # rollout.agent.max_queued_requests 0: every completion is refused, to be retried.
    status, body, headers = post("/chat/completions", {"messages": [{"role": "user",
                                                                     "content": "2*3="}]})
    error_of(status, body, 429, "saturated")
    check(headers["Retry-After"] == "1", "429 says when to retry")
    with open(REPORT, "w") as f:
        json.dump({"saturated": True}, f)


def rewritten():
    # on_rewrite segment: a request that rewrites the history is answered from a new segment.
    status, body, _ = post("/completions", {"prompt": "2*3=", "max_tokens": 20})
    check(status == 200 and json.loads(body)["choices"][0]["text"] == "<calc>2*3</calc>", body)
    status, body, _ = post("/completions", {
        "prompt": "2*3=<calc>2*3</calc><result>6</result>", "max_tokens": 4})
    check(status == 200 and json.loads(body)["choices"][0]["text"] == "6", body)
    status, body, _ = post("/completions", {"prompt": "7*7=", "max_tokens": 20})
    check(status == 200 and json.loads(body)["choices"][0]["text"] == "<calc>2*3</calc>", body)
    print(json.dumps({"reward": 1.0}))


def main():
    if os.environ.get("AGENT_EXPECT") == "429":
        return saturated()
    if os.environ.get("AGENT_EXPECT") == "segment":
        return rewritten()
    record = json.loads(sys.stdin.readline())
    check(record.get("prompt") == "2*3=", "the record on stdin: %r" % record)
    {"0": episode_0, "1": episode_1, "2": episode_2}[EPISODE.rsplit(".", 1)[1]]()
    if not os.path.exists(REPORT):
        with open(REPORT, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
