// Conversions between the wire types (flywheel.v1) and the core's structs.
#pragma once

#include "flywheel/buffer/trajectory.h"
#include "flywheel/v1/trajectory.pb.h"

namespace flywheel::buffer {

TrajectoryGroup from_proto(const v1::TrajectoryGroup& proto);
void to_proto(const TrajectoryGroup& group, v1::TrajectoryGroup* proto);

}  // namespace flywheel::buffer
