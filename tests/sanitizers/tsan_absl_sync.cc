// Makes Debian's Abseil synchronization visible to ThreadSanitizer.
//
// libabsl_synchronization.so is not built with TSan, so TSan sees neither
// the locking of absl::Mutex (Pagoda's, and gRPC's own, which is an
// absl::Mutex too) nor the hand-offs of absl::Notification, and reports every
// access to guarded data from two threads as a race. Linked into every
// executable of a TSan build (cmake/PagodaSanitizers.cmake), these
// definitions interpose on the library's: each tells TSan what the call does
// to the mutex (lock, unlock, try, reader, the release and re-acquire inside
// Await and CondVar::Wait) and then calls the library's own function, found
// with dlsym(RTLD_NEXT). Only the entry points Pagoda and gRPC call are
// covered; a missing one shows up as a race report naming it. Destruction
// is not annotated: gRPC frees its mutexes after reference counts that TSan
// cannot see, and TSan forgets a freed mutex by itself.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

// The library's definition of `mangled` (the one after this executable's).
template <typename Function>
Function Real(const char* mangled) {
  void* found = dlsym(RTLD_NEXT, mangled);
  if (found == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in Abseil: %s\n", mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<Function>(found);
}

// The library's own functions call each other through these definitions
// too (CondVar::WaitWithTimeout calls WaitWithDeadline, Notification::Notify
// locks its mutex...): only the outermost call of a thread tells TSan.
thread_local int depth = 0;
struct Outermost {
  Outermost() : is(depth++ == 0) {}
  ~Outermost() { --depth; }
  const bool is;
};

// Declares `real`, the library's function, and returns its result at once
// (called with the arguments after `mangled`) unless this is the outermost
// call of the thread.
#define PAGODA_REAL(type, mangled, ...)         \
  static const auto real = Real<type>(mangled); \
  const Outermost outermost;                    \
  if (!outermost.is) return real(__VA_ARGS__)

void Locked(void* mu, unsigned flags) {
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
}
void Unlocked(void* mu, unsigned flags) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
}

// A call that releases `mu` and holds it again when it returns (Await,
// CondVar::Wait): to TSan, an unlock before it and a lock after it.
template <typename Call>
auto ReleasedDuring(void* mu, unsigned flags, Call call) {
  Unlocked(mu, flags);
  auto result = call();
  Locked(mu, flags);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  PAGODA_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv", this);
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  PAGODA_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv", this);
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  PAGODA_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv", this);
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed),
                         0);
  return locked;
}

void Mutex::ReaderLock() {
  PAGODA_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv", this);
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

void Mutex::ReaderUnlock() {
  PAGODA_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv", this);
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

bool Mutex::ReaderTryLock() {
  PAGODA_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv", this);
  const unsigned flags = __tsan_mutex_read_lock | __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(this, flags);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, flags | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  PAGODA_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE", this, cond);
  __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  PAGODA_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE", this,
              cond, timeout);
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, timeout);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  PAGODA_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE", this,
              cond, deadline);
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, deadline);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  PAGODA_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE", this, cond);
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this, cond);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

// Await is called with the mutex held for writing (Pagoda and gRPC never
// await under a reader lock).
void Mutex::Await(const Condition& cond) {
  PAGODA_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE",
              this, cond);
  ReleasedDuring(this, 0, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  PAGODA_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE", this,
              cond, timeout);
  return ReleasedDuring(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  PAGODA_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE", this, cond,
              deadline);
  return ReleasedDuring(this, 0, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  PAGODA_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE", this, mu);
  ReleasedDuring(mu, 0, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  PAGODA_REAL(bool (*)(CondVar*, Mutex*, Duration),
              "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE", this, mu,
              timeout);
  return ReleasedDuring(mu, 0, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  PAGODA_REAL(bool (*)(CondVar*, Mutex*, Time),
              "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", this, mu,
              deadline);
  return ReleasedDuring(mu, 0, [&] { return real(this, mu, deadline); });
}

// Notification: Notify releases, every wait (and HasBeenNotified, inline,
// through its acquire load of the flag) acquires. The flag follows the
// mutex in the object (notification.h).
namespace {
void* NotifiedFlag(const Notification* notification) {
  return const_cast<char*>(reinterpret_cast<const char*>(notification) + sizeof(Mutex));
}
}  // namespace

void Notification::Notify() {
  PAGODA_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv", this);
  __tsan_release(this);
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  PAGODA_REAL(void (*)(const Notification*),
              "_ZNK4absl7debian312Notification19WaitForNotificationEv", this);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  PAGODA_REAL(bool (*)(const Notification*, Duration),
              "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE",
              this, timeout);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  PAGODA_REAL(bool (*)(const Notification*, Time),
              "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE", this,
              deadline);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool BlockingCounter::DecrementCount() {
  PAGODA_REAL(bool (*)(BlockingCounter*), "_ZN4absl7debian315BlockingCounter14DecrementCountEv",
              this);
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  PAGODA_REAL(void (*)(BlockingCounter*), "_ZN4absl7debian315BlockingCounter4WaitEv", this);
  real(this);
  __tsan_acquire(this);
}

ABSL_NAMESPACE_END
}  // namespace absl
