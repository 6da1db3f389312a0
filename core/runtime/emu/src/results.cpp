// results.cpp: findings and the result document.
//
// What a run reports (docs/emulator.md): each finding (race, uninit, bounds, divergence)
// names the lowest (threadgroup, thread) it occurred in and counts the
// others, deduplicated by (kind, pc, other pc, address space, buffer), so a finding's
// text does not depend on how threadgroups were spread over workers. The stats count
// what MSL's memory model distinguishes: device and threadgroup bytes and accesses,
// threadgroup_barrier and simd meetings (per kind: shuffle, reduce, scan, vote, broadcast,
// matrix load and store), atomics. A launch error (what Metal would refuse
// at dispatch) is a result document with its message and exit status 3.

#include <cerrno>

#include "runtime.h"

namespace mt {

// ---------------------------------------------------------------------------------------
// Findings: deduplicated by (kind, pc, other pc, address space, buffer).

void add_finding(Worker* w, Finding f) {
  for (Finding& g : w->findings)
    if (g.kind == f.kind && g.pc == f.pc && g.other_pc == f.other_pc && g.device == f.device &&
        g.buffer == f.buffer) {
      ++g.count;
      return;
    }
  if (w->findings.size() >= g_launch.job->max_findings) {
    ++w->dropped_findings;
    return;
  }
  w->findings.push_back(std::move(f));
}

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

Finding make_finding(Worker* w, FindingKind kind, bool device, int32_t buffer, uint64_t offset,
                     uintptr_t pc, std::string detail) {
  Finding f;
  f.kind = kind;
  f.group = w->group;
  f.thread = w->current ? w->current->tid : 0;
  f.other_thread = -1;
  f.other_group = -1;
  f.device = device;
  f.buffer = buffer;
  f.offset = offset;
  f.pc = pc;
  f.other_pc = 0;
  f.detail = std::move(detail);
  return f;
}

// ---------------------------------------------------------------------------------------
// Results

// The stats key of each simd collective kind, indexed by __MT_SIMD_* (mt_runtime.h).
const char* const kSimdKindStats[kSimdKinds] = {
    nullptr, "simd_shuffle_ops", "simd_reduce_ops", "simd_scan_ops", "simd_vote_ops",
    "simd_matrix_load_ops", "simd_matrix_store_ops", "simd_broadcast_ops"};

void json_string(FILE* out, const std::string& s) {
  fputc('"', out);
  for (char c : s) {
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (uint8_t(c) < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

void write_position(FILE* out, uint64_t linear, const uint32_t* dims) {
  fprintf(out, "[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", linear % dims[0], linear / dims[0] % dims[1],
          linear / (uint64_t(dims[0]) * dims[1]));
}

// Bytes of buffer `b` read (bit 0) and written (bit 1) by any worker: the workers' maps
// OR-ed eight bytes at a time, each bit counted across a word at once.
void count_unique(uint32_t b, uint64_t size, uint64_t* read, uint64_t* written) {
  constexpr uint64_t kReadBits = 0x0101010101010101ull, kWriteBits = kReadBits << 1;
  uint64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t any = 0;
    for (Worker* w : g_workers) {
      uint64_t word;
      std::memcpy(&word, w->touched[b] + i, 8);
      any |= word;
    }
    *read += uint64_t(__builtin_popcountll(any & kReadBits));
    *written += uint64_t(__builtin_popcountll(any & kWriteBits));
  }
  for (; i < size; ++i) {
    uint8_t any = 0;
    for (Worker* w : g_workers) any |= w->touched[b][i];
    *read += any & 1;
    *written += (any >> 1) & 1;
  }
}

void write_results() {
  const JobHeader* job = g_launch.job;
  std::vector<Finding> all;
  uint64_t dropped = 0;
  Worker total;
  for (Worker* w : g_workers) {
    for (Finding& f : w->findings) {
      bool merged = false;
      for (Finding& a : all)
        if (a.kind == f.kind && a.pc == f.pc && a.other_pc == f.other_pc && a.device == f.device &&
            a.buffer == f.buffer) {
          a.count += f.count;
          if (f.group < a.group || (f.group == a.group && f.thread < a.thread)) {
            uint64_t c = a.count;
            a = f;
            a.count = c;
          }
          merged = true;
          break;
        }
      if (!merged) all.push_back(f);
    }
    dropped += w->dropped_findings;
    for (uint32_t b = 0; b < kMaxBuffers; ++b) {
      total.dev_read[b] += w->dev_read[b];
      total.dev_written[b] += w->dev_written[b];
    }
    total.tg_read += w->tg_read;
    total.tg_written += w->tg_written;
    total.barriers += w->barriers;
    for (uint32_t k = 0; k < kSimdKinds; ++k) total.simd_ops[k] += w->simd_ops[k];
    total.atomics += w->atomics;
    total.dev_loads += w->dev_loads;
    total.dev_stores += w->dev_stores;
    total.tg_loads += w->tg_loads;
    total.tg_stores += w->tg_stores;
    total.groups_run += w->groups_run;
    total.threads_run += w->threads_run;
    total.simdgroups_run += w->simdgroups_run;
  }
  std::sort(all.begin(), all.end(), [](const Finding& a, const Finding& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.group != b.group) return a.group < b.group;
    if (a.thread != b.thread) return a.thread < b.thread;
    return a.pc < b.pc;
  });
  uint64_t simd_ops = 0;
  for (uint64_t n : total.simd_ops) simd_ops += n;
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (!out) {  // no report: run.py shows stderr with the exit status
    fprintf(stderr, "cannot make the result document: %s\n", strerror(errno));
    _exit(5);
  }
  fprintf(out, "{\"status\":\"ok\",\"stats\":{");
  fprintf(out, "\"groups\":%" PRIu64 ",\"threads\":%" PRIu64 ",\"simdgroups\":%" PRIu64
               ",\"barriers\":%" PRIu64 ",\"simd_ops\":%" PRIu64 ",\"atomic_ops\":%" PRIu64
               ",\"threadgroup_bytes_read\":%" PRIu64 ",\"threadgroup_bytes_written\":%" PRIu64
               ",\"threadgroup_memory_bytes\":%u,\"device_load_ops\":%" PRIu64
               ",\"device_store_ops\":%" PRIu64 ",\"threadgroup_load_ops\":%" PRIu64
               ",\"threadgroup_store_ops\":%" PRIu64,
          total.groups_run, total.threads_run, total.simdgroups_run,
          total.barriers, simd_ops, total.atomics, total.tg_read, total.tg_written,
          g_launch.arena_bytes.load(), total.dev_loads, total.dev_stores, total.tg_loads,
          total.tg_stores);
  // simd_ops split by kind (the cost model prices a reduction, a shuffle and a matrix
  // access differently); each name is the stats key of one __MT_SIMD_* kind.
  for (uint32_t k = 1; k < kSimdKinds; ++k)
    fprintf(out, ",\"%s\":%" PRIu64, kSimdKindStats[k], total.simd_ops[k]);
  uint64_t unique[2][kMaxBuffers] = {};
  for (uint32_t b = 0; b < job->nbuffers; ++b)
    count_unique(b, job->buffers[b].size, &unique[0][b], &unique[1][b]);
  const char* names[4] = {"device_bytes_read", "device_bytes_written", "device_unique_bytes_read",
                          "device_unique_bytes_written"};
  const uint64_t* values[4] = {total.dev_read, total.dev_written, unique[0], unique[1]};
  for (int k = 0; k < 4; ++k) {
    fprintf(out, ",\"%s\":[", names[k]);
    for (uint32_t b = 0; b < job->nbuffers; ++b)
      fprintf(out, "%s%" PRIu64, b ? "," : "", values[k][b]);
    fputc(']', out);
  }
  fprintf(out, "},\"dropped_findings\":%" PRIu64 ",\"findings\":[", dropped);
  for (size_t i = 0; i < all.size(); ++i) {
    const Finding& f = all[i];
    fprintf(out, "%s{\"kind\":\"%s\",\"group\":", i ? "," : "", kKindNames[f.kind]);
    write_position(out, f.group, job->grid);
    fprintf(out, ",\"thread\":");
    write_position(out, f.thread, job->threadgroup);
    fprintf(out, ",\"thread_index\":%u,\"other_thread\":%d,\"other_group\":", f.thread, f.other_thread);
    if (f.other_group >= 0) write_position(out, uint64_t(f.other_group), job->grid);
    else fputs("null", out);
    fprintf(out, ",\"space\":\"%s\",\"buffer\":%d,\"offset\":%" PRIu64
                 ",\"pc\":%" PRIuPTR ",\"other_pc\":%" PRIuPTR ",\"count\":%" PRIu64 ",\"detail\":",
            f.device ? "device" : "threadgroup", f.buffer, f.offset, file_pc(f.pc),
            file_pc(f.other_pc), f.count);
    json_string(out, f.detail);
    fputc('}', out);
  }
  fprintf(out, "]}\n");
  fclose(out);
  write_report(text, size);
  free(text);
}

void write_error(const char* status, const std::string& message) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (!out) {  // the caller exits next; run.py shows stderr with the exit status
    fprintf(stderr, "%s: %s (cannot make the result document: %s)\n", status,
            message.c_str(), strerror(errno));
    return;
  }
  fprintf(out, "{\"status\":\"%s\",\"message\":", status);
  json_string(out, message);
  fprintf(out, "}\n");
  fclose(out);
  write_report(text, size);
  free(text);
}

[[noreturn]] void fail_launch(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  write_error("launch_error", buf);
  _exit(3);
}

}  // namespace mt
