// How zero-run learns which ranks started: each rank wrapper writes one marker line to its stderr
// as it starts; the launcher (mpirun or srun) forwards it with the rank's output to zero-run,
// which reads the launcher's stderr, takes the markers out and passes everything else on. Unlike
// the status directory's files, this needs no file system shared between the hosts.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "launch/launch_plan.h"

namespace zero::launch {

// The line a rank wrapper writes to stderr as it starts.
std::string start_marker(int rank, const std::string& host);

// Takes the markers out of a stream read in chunks of any size. A marker split between chunks
// is held back until its end arrives; all other bytes pass at once (a progress bar's \r lines
// stay live).
class StartMarkerFilter {
 public:
  std::string feed(std::string_view chunk);  // returns the bytes to pass on
  std::string flush();                       // at the end of the stream: whatever was held back
  const std::map<int, std::string>& started() const { return started_; }  // rank -> its host

 private:
  std::string held_;
  std::map<int, std::string> started_;
};

// The ranks of 0..total-1 not in `started`.
std::vector<int> ranks_not_started(int total, const std::map<int, std::string>& started);

// mpirun's placement: the ranks of plan.hosts[i] follow those of the hosts before it. Returns
// the hosts, in plan order, where some rank has not started (empty when plan.hosts has no slots,
// as under srun, which places ranks itself).
std::vector<std::string> hosts_not_started(const std::vector<HostSlots>& hosts,
                                           const std::map<int, std::string>& started);

}  // namespace zero::launch
