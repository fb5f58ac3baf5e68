#include "support/test_certs.h"

#include <cstdlib>
#include <fstream>

namespace mgpu::testing {
namespace {

Status Run(const std::string& command, const std::string& log) {
  int rc = std::system((command + " >>" + log + " 2>&1").c_str());
  if (rc != 0)
    return Error{"openssl failed (status " + std::to_string(rc) + "), see " + log + ": " + command};
  return Status::Ok();
}

}  // namespace

Result<TestCerts> GenerateTestCerts(const std::string& dir) {
  TestCerts c{dir + "/ca.crt",     dir + "/ca.key",     dir + "/server.crt",
              dir + "/server.key", dir + "/client.crt", dir + "/client.key"};
  const std::string log = dir + "/openssl.log";
  std::ofstream(dir + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                        "extendedKeyUsage=serverAuth\n";
  std::ofstream(dir + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string steps[] = {
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=mgpu-test-ca -keyout " + c.ca_key +
          " -out " + c.ca_cert,
      "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout " + c.server_key + " -out " + dir +
          "/server.csr",
      "openssl x509 -req -in " + dir + "/server.csr -CA " + c.ca_cert + " -CAkey " + c.ca_key +
          " -CAcreateserial -days 2 -extfile " + dir + "/server.ext -out " + c.server_cert,
      "openssl req -newkey rsa:2048 -nodes -subj /O=system:masters/CN=mgpu-test -keyout " + c.client_key +
          " -out " + dir + "/client.csr",
      "openssl x509 -req -in " + dir + "/client.csr -CA " + c.ca_cert + " -CAkey " + c.ca_key +
          " -CAcreateserial -days 2 -extfile " + dir + "/client.ext -out " + c.client_cert,
  };
  for (const std::string& step : steps) {
    if (Status s = Run(step, log); !s) return Error{s.message()};
  }
  return c;
}

}  // namespace mgpu::testing
