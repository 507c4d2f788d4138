// Implements include/fitsum/model/host_checked_ids.h.
#include "fitsum/model/host_checked_ids.h"

namespace fitsum::model {

namespace {
thread_local bool t_checked = false;
}

IdsCheckedOnHost::IdsCheckedOnHost(bool checked) : previous_(t_checked) { t_checked = t_checked || checked; }

IdsCheckedOnHost::~IdsCheckedOnHost() { t_checked = previous_; }

bool ids_checked_on_host() { return t_checked; }

}  // namespace fitsum::model
