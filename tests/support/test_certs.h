// Test PKI generated with the openssl command-line tool: a CA, a server certificate for 127.0.0.1/localhost
// and a client certificate (CN mgpu-test, O system:masters), all PEM files in one directory.
#pragma once

#include <string>

#include "common/result.h"

namespace mgpu::testing {

struct TestCerts {
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
};

// Writes the files into `dir` (which must exist). Fails with openssl's exit status when a step fails.
Result<TestCerts> GenerateTestCerts(const std::string& dir);

}  // namespace mgpu::testing
