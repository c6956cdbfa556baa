#!/usr/bin/env python3
"""A remote environment for flywheel, in Python (proto/flywheel/v1/environment.proto).

The "keyword" game: the model must say the record's "answer" word. Each model turn is answered
"warmer" (the turn shares a letter with the word) or "colder", and the episode ends with reward 1
as soon as a turn contains the word (turn stop string "</say>", so a model may also write
<say>WORD</say>). A record's "delay_s" makes every step that slow (a slow tool).

Generate the Python code of the proto once, then run the server:

  protoc -I proto --python_out=OUT --grpc_out=OUT \
      --plugin=protoc-gen-grpc=$(which grpc_python_plugin) proto/flywheel/v1/environment.proto
  PYTHONPATH=OUT /usr/bin/python3 examples/environments/python/keyword_server.py --port 50061

and point flywheel at it:

  environment: {name: remote, params: {address: "127.0.0.1:50061"}}

With --token-file, every call must carry "authorization: Bearer <the file's first line>".
Debian packages: python3-grpcio python3-protobuf (scripts/bootstrap.sh installs them, for
Debian's /usr/bin/python3).
"""
import argparse
import json
import sys
import threading
import time
from concurrent import futures

import grpc

from flywheel.v1 import environment_pb2 as pb
from flywheel.v1 import environment_pb2_grpc as pb_grpc


class Keyword(pb_grpc.EnvironmentServicer):
    def __init__(self, token, verbose):
        self._token = token
        self._verbose = verbose
        self._lock = threading.Lock()
        self._episodes = {}  # episode id -> its record

    def _authorize(self, context):
        if self._token is None:
            return
        metadata = dict(context.invocation_metadata())
        if metadata.get("authorization") != "Bearer " + self._token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

    def Describe(self, request, context):
        self._authorize(context)
        return pb.DescribeReply(turn_stop_strings=["</say>"])

    def Reset(self, request, context):
        self._authorize(context)
        try:
            record = json.loads(request.record_json)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"record_json: {e}")
        if not isinstance(record.get("answer"), str) or not record["answer"]:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the record has no 'answer' word")
        with self._lock:
            self._episodes[request.episode_id] = record
        return pb.ResetReply()

    def Step(self, request, context):
        self._authorize(context)
        with self._lock:
            record = self._episodes.get(request.episode_id)
        if record is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no episode {request.episode_id}")
        if self._verbose:
            print(f"step {request.episode_id} turn {request.turn_index}", flush=True)
        time.sleep(float(record.get("delay_s", 0)))
        word = record["answer"]
        if word in request.text:
            return pb.StepReply(reward=1.0, done=True, info={"found_at_turn": request.turn_index})
        warmer = any(c in word for c in request.text)
        return pb.StepReply(observation=pb.Observation(text="warmer" if warmer else "colder"))

    def Close(self, request, context):
        self._authorize(context)
        with self._lock:
            self._episodes.pop(request.episode_id, None)
        return pb.CloseReply()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--token-file", help="require this bearer token")
    parser.add_argument("--threads", type=int, default=8, help="concurrent calls")
    parser.add_argument("--verbose", action="store_true", help="print every step served")
    args = parser.parse_args()
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads))
    pb_grpc.add_EnvironmentServicer_to_server(Keyword(token, args.verbose), server)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        sys.exit(f"keyword_server: cannot listen on {args.host}:{args.port}")
    server.start()
    print(f"keyword_server: listening on {args.host}:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
