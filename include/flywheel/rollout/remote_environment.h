// The `remote` environment: an environment served over gRPC (proto/flywheel/v1/
// environment.proto) by a program in any language; examples/environments/python/ has one.
//
//   environment:
//     name: remote
//     params: {address: "127.0.0.1:50061", timeout_s: "30", token_file: "env.token"}
//
// Params: address (host:port, required); timeout_s, the deadline of one call (default 30;
// environment.step_timeout_s still bounds every step); token_file, a file whose first line is
// sent as "authorization: Bearer <token>" with every call (the controller's token file works).
// The server is asked for its turn stop strings when the environment is made: a server that is
// down then is an error naming its address. A call that fails later (the server went away, a
// deadline passed) ends that episode with finish_reason error, and the worker goes on.
#pragma once

#include "absl/status/status.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::rollout {

absl::Status register_remote_environment(core::PluginRegistry& registry);

}  // namespace flywheel::rollout
