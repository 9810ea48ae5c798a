// A hostfile from a stranger (issue 37): parsed, filtered, and planned into the mpirun command
// line. Host names are checked as host names (none may reach ssh as an option), so the plan's
// hosts never start with '-'.
#include <cstdlib>

#include "fuzz_input.h"
#include "launch/launch_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("hostfile", fuzz::as_text(data, size));
  fuzz::only_clear_errors("hostfile", [&] {
    zero::launch::LaunchOptions options;
    options.hostfile = path;
    options.hostfile_hosts = zero::launch::read_hostfile(path);
    options.program = {"/bin/true"};
    options.self = "/usr/bin/zero-run";
    const zero::launch::LaunchPlan plan = zero::launch::plan_launch(options);
    for (const auto& host : plan.hosts)
      if (host.host.empty() || host.host[0] == '-') std::abort();  // a host that ssh would take as an option
    (void)zero::launch::shell_join(plan.argv);
  });
  return 0;
}
