#include "extender/server.h"

#include <httplib.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>

#include "common/http_server.h"
#include "common/model.h"
#include "common/nodes_json.h"
#include "extender/admission.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;
constexpr char kJson[] = "application/json";

constexpr char kDaemon[] = "mgpu-scheduler-extender";

// The heap the allocator has handed out and not had back (glibc's mallinfo2: in use in its arenas plus its
// own mmaps), the part of RSS that the cache of pods and nodes makes up: per-pod memory is stated with it.
std::string RenderHeap() {
  const struct mallinfo2 info = mallinfo2();
  return "# HELP mgpu_extender_heap_bytes Heap in use (malloc's arenas and mmaps), not counting freed memory "
         "the allocator keeps.\n# TYPE mgpu_extender_heap_bytes gauge\nmgpu_extender_heap_bytes " +
         std::to_string(info.uordblks + info.hblkhd) + "\n";
}

}  // namespace

HttpServer::HttpServer(Extender& extender, ClusterCache& cache, Metrics& metrics, std::function<bool()> ready,
                       WorkloadLookup workload, TemplateWriter templates, ClaimSpecReader claims)
    : extender_(extender),
      cache_(cache),
      metrics_(metrics),
      ready_(std::move(ready)),
      workload_(std::move(workload)),
      templates_(std::move(templates)),
      claims_(std::move(claims)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const std::string& address, const ExtenderConfig& config) {
  Result<HostPort> listen = ParseHostPort(address, "extender.listenAddress");
  if (!listen.ok()) return Error{listen.message()};
  HttpLimits limits;
  limits.workers = static_cast<int>(config.http_workers);
  limits.request_timeout = std::chrono::milliseconds(config.http_request_timeout_ms);
  limits.connections_per_client = static_cast<int>(config.http_connections_per_client);
  limits.max_body_bytes = static_cast<size_t>(config.max_body_bytes);
  // kube-scheduler then sends its concurrent calls over one connection instead of a TLS handshake for each
  // beyond the two it keeps idle (bench/RESULTS.md section 5).
  limits.http2 = true;
  server_ = std::make_unique<BoundedHttpServer>(kDaemon, limits);
  BoundedHttpServer& s = *server_;

  // Every verb: time it, count it, and turn an unexpected exception into a 500 instead of a dead process.
  const auto verb = [this](const std::string& name,
                           std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [this, name, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      res.status = 200;
      try {
        fn(req, res);
      } catch (...) {
        spdlog::error("{}: {}", name, DescribeException(std::current_exception()));
        res.status = 500;
        res.set_content(EncodeError(InternalErrorSentence(kDaemon, name)), kJson);
      }
      metrics_.ObserveRequest(
          name, res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    };
  };
  const auto bad_request = [](httplib::Response& res, const std::string& message) {
    res.status = 400;
    res.set_content(EncodeError(message), kJson);
  };

  // Before the informers have synced (or on a follower) the cache cannot answer for the cluster: filter and
  // bind report a scheduling error, prioritize and preempt a 503, so the scheduler retries instead of acting
  // on an empty view.
  const auto not_ready = [this] { return ready_ && !ready_(); };
  constexpr char kNotReady[] =
      "mgpu-scheduler-extender is not ready (informers not synced, or not the leader)";
  // The pod of a request is read once, here at the edge, and only when the verb will run.
  const auto reader = [this](bool ready) -> PodReader {
    if (ready) return std::bind_front(&Extender::Read, &extender_);
    return [](const nlohmann::json&) { return std::shared_ptr<const PodFacts>(); };
  };
  // filter and choose take kube-scheduler's filter arguments and answer its filter reply.
  const auto filter = [this, bad_request, not_ready, kNotReady,
                       reader](FilterResult (Extender::*decide)(const ExtenderArgs&)) {
    return [this, bad_request, not_ready, kNotReady, reader, decide](const httplib::Request& req,
                                                                     httplib::Response& res) {
      const bool ready = !not_ready();
      Result<ExtenderArgs> args = ExtenderArgs::Parse(req.body, reader(ready));
      if (!args.ok()) return bad_request(res, args.message());
      FilterResult result;
      if (!ready) {
        result.error = kNotReady;
      } else {
        result = (extender_.*decide)(*args);
      }
      res.set_content(EncodeFilterResult(*args, result), kJson);
    };
  };
  s.Post("/filter", verb("filter", filter(&Extender::Filter)));
  s.Post("/choose", verb("choose", filter(&Extender::Choose)));
  s.Post("/choose-cpu-only", verb("choose-cpu-only", filter(&Extender::ChooseCpuOnly)));
  s.Post("/prioritize", verb("prioritize", [this, bad_request, not_ready, kNotReady, reader](
                                               const httplib::Request& req, httplib::Response& res) {
           const bool ready = !not_ready();
           Result<ExtenderArgs> args = ExtenderArgs::Parse(req.body, reader(ready));
           if (!args.ok()) return bad_request(res, args.message());
           if (!ready) {
             res.status = 503;
             return res.set_content(EncodeError(kNotReady), kJson);
           }
           res.set_content(EncodePrioritizeResult(extender_.Prioritize(*args)), kJson);
         }));
  s.Post("/bind", verb("bind", [this, bad_request, not_ready, kNotReady](const httplib::Request& req,
                                                                         httplib::Response& res) {
           Result<BindArgs> args = BindArgs::Parse(req.body);
           if (!args.ok()) return bad_request(res, args.message());
           res.set_content(EncodeError(not_ready() ? kNotReady : extender_.Bind(*args)), kJson);
         }));
  s.Post("/preempt", verb("preempt", [this, bad_request, not_ready, kNotReady, reader](
                                         const httplib::Request& req, httplib::Response& res) {
           const bool ready = !not_ready();
           Result<PreemptArgs> args = PreemptArgs::Parse(req.body, reader(ready));
           if (!args.ok()) return bad_request(res, args.message());
           if (!ready) {
             res.status = 503;
             return res.set_content(EncodeError(kNotReady), kJson);
           }
           res.set_content(EncodePreemptResult(extender_.Preempt(*args)), kJson);
         }));
  // The admission webhooks: an AdmissionReview in, an AdmissionReview (or a plain 400 sentence) out.
  const auto admission = [&verb](const char* name, std::function<AdmissionReply(const std::string&)> review) {
    return verb(name, [review](const httplib::Request& req, httplib::Response& res) {
      const AdmissionReply reply = review(req.body);
      res.status = reply.status;
      res.set_content(reply.body, reply.status == 200 ? kJson : "text/plain");
    });
  };
  s.Post("/validate", admission("validate", [this](const std::string& body) {
           return ReviewAdmission(body, cache_.config(), workload_);
         }));
  s.Post("/mutate-memory", admission("mutate-memory", [this](const std::string& body) {
           return MutatePodMemory(body, cache_.config(), workload_);
         }));
  s.Post("/mutate", admission("mutate", [this](const std::string& body) {
           return MutatePodForDra(body, cache_.config(), workload_, templates_);
         }));
  s.Post("/mutate-claims", admission("mutate-claims", [this](const std::string& body) {
           return MutateClaimPodForDra(body, cache_.config(), claims_);
         }));
  s.Post("/validate-claims", admission("validate-claims", [this](const std::string& body) {
           return ReviewClaimAdmission(body, cache_.config());
         }));
  s.Get("/healthz",
        [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = !ready_ || ready_();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ok\n" : "informers not synced\n", "text/plain");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(*cache_.Snapshot()) + RenderReadiness(!ready_ || ready_()) +
                        RenderHttpRefusals("mgpu_extender", server_->Refusals()) +
                        kube::RenderEventCounts("mgpu_extender", extender_.EventCounts()) + RenderHeap(),
                    "text/plain; version=0.0.4");
  });
  s.Get("/v1/nodes", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(NodesJson(cache_.Snapshot()->Nodes()).dump(), kJson);
  });

  if (Status started = s.Start(address, "extender.listenAddress", config.tls_cert_file, config.tls_key_file);
      !started.ok())
    return started;
  port_ = s.port();
  spdlog::info("extender listening on {} port {}{}", listen->host, port_,
               config.tls_cert_file.empty() ? "" : " (TLS)");
  return Status::Ok();
}

void HttpServer::Stop() {
  if (server_) server_->Stop();
}

}  // namespace mgpu::extender
