#ifndef PAGODA_COMMON_FLAGS_H_
#define PAGODA_COMMON_FLAGS_H_

namespace pagoda {

// Lets command lines use vLLM's dashed flag names (--max-num-seqs) for
// Abseil flags, whose names cannot hold '-' (max_num_seqs). Rewrites, in
// place, the name part of each "-name[=value]" / "--name[=value]" argument
// whose underscored spelling is a registered flag; anything else (values,
// positional arguments, unknown names) is left as it is. Stops at "--".
// Call before absl::ParseCommandLine.
void AcceptDashedFlagNames(int argc, char** argv);

}  // namespace pagoda

#endif  // PAGODA_COMMON_FLAGS_H_
