// zerocpp — DeepSpeed's ZeRO in C++. The umbrella header.
#pragma once

#include "zero/activation_checkpoint.h"
#include "zero/allocator.h"
#include "zero/comm_stats.h"
#include "zero/communicator.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/init.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"
#include "zero/memory_tracker.h"
#include "zero/world.h"
