// `archipelago ca init DIR` and `archipelago ca issue DIR NAME [--host H ...] [--days N]`: the run's
// certificate authority (net/certificate_authority.hpp) on the command line, to make the files that
// [net] tls_certificate / tls_key / tls_ca name, without the openssl tool. Torch-free, actor-free.
//
// init makes DIR/ca.pem and DIR/ca.key; issue makes DIR/NAME.pem (NAME's certificate, then the CA's)
// and DIR/NAME.key for one process, named NAME and each --host (an address or a DNS name). Neither
// ever overwrites a private key. Each prints the paths it wrote, one per line.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "net/certificate_authority.hpp"

namespace CLI {
class App;
}

namespace archipelago::apps {

enum class CaAction { none, init, issue };

struct CaArguments {
  CaAction action = CaAction::none;  // set by whichever of `init` / `issue` was parsed
  std::string dir;
  std::string name;                  // issue only
  std::vector<std::string> hosts;    // issue only: --host, repeatable
  int days = net::kDefaultCertificateValidityDays;
};

// Adds the `init` and `issue` subcommands, with their arguments, to `command` (the `ca` subcommand).
void add_ca_options(CLI::App& command, CaArguments& arguments);

// 0: written; 1: the system refused (a write failed, no randomness); 2: bad arguments or refused (an
// existing key, a bad name or host, a CA key others may read, no CA in DIR). Errors go to `err`.
int run_ca(const CaArguments& arguments, std::ostream& out, std::ostream& err);
int run_ca(const CaArguments& arguments);  // stdout, stderr

}  // namespace archipelago::apps
