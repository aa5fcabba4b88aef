// The `ca` subcommands: arguments in, one call into net/certificate_authority, paths out.
#include "apps/ca_command.hpp"

#include <iostream>

#include <CLI/CLI.hpp>

namespace archipelago::apps {

void add_ca_options(CLI::App& command, CaArguments& arguments) {
  command.require_subcommand(1);

  auto* init = command.add_subcommand("init", "make a run CA: DIR/ca.pem and DIR/ca.key (DIR is created, mode 0700)");
  init->add_option("dir", arguments.dir, "directory of the CA")->required();
  init->callback([&arguments] { arguments.action = CaAction::init; });

  auto* issue = command.add_subcommand("issue", "sign a certificate for one process: DIR/NAME.pem and DIR/NAME.key");
  issue->add_option("dir", arguments.dir, "directory of the CA (made by `ca init`)")->required();
  issue->add_option("name", arguments.name, "the process's name: certificate CN and first subjectAltName")->required();
  issue->add_option("--host", arguments.hosts, "an address or DNS name the process is reached by (repeatable)")
      ->allow_extra_args(false);
  issue->add_option("--days", arguments.days, "validity in days (default 365)")
      ->check(CLI::Range(1, net::kCaValidityDays));
  issue->callback([&arguments] { arguments.action = CaAction::issue; });
}

int run_ca(const CaArguments& arguments, std::ostream& out, std::ostream& err) {
  Status done = Status::success();
  std::string key_file, certificate_file;
  switch (arguments.action) {
    case CaAction::init:
      done = net::init_certificate_authority(arguments.dir);
      key_file = net::private_key_path(arguments.dir, net::kCaName);
      certificate_file = net::certificate_path(arguments.dir, net::kCaName);
      break;
    case CaAction::issue:
      done = net::issue_certificate(arguments.dir, arguments.name, arguments.hosts, net::IssueOptions{arguments.days});
      key_file = net::private_key_path(arguments.dir, arguments.name);
      certificate_file = net::certificate_path(arguments.dir, arguments.name);
      break;
    case CaAction::none:
      err << "archipelago ca: say `init DIR` or `issue DIR NAME`\n";
      return 2;
  }
  if (!done.ok()) {
    err << "archipelago ca: " << done.error().to_string() << "\n";
    const ErrorCode code = done.error().code;
    return code == ErrorCode::io || code == ErrorCode::unavailable ? 1 : 2;
  }
  out << key_file << "\n" << certificate_file << "\n";
  return 0;
}

int run_ca(const CaArguments& arguments) { return run_ca(arguments, std::cout, std::cerr); }

}  // namespace archipelago::apps
