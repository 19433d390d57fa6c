"""What a submission's host code links to and runs, read from its compiled object file.

Source checks depend on spelling (a macro pastes `fo` and `pen` together, a declaration says
`__asm__("getenv")`); the object file does not. A kernel file's host code is a launcher: it
computes a grid, launches kernels and returns the error. `inspect(object)` reads the ELF
object nvcc made of it (`compile_cubin(..., host_object=True)`, the very object grading links
the extension from: `build_checked`) and reports:

- `calls`: every undefined symbol, i.e. every function or variable the host code takes from
  a library, that is not on ALLOWED, with what it is (LIBRARY_KINDS): files, network,
  processes, the environment, loading code, raw system calls, device memory, copies, streams...
  A few are allowed only where the compilers put them, in code of the shape they write
  (COMPILER_WRITTEN): `exit` in the host stub nvcc writes for a `__device__` function, and
  `std::ios_base::Init` with its `__cxa_atexit` in the initialiser g++ writes for `<iostream>`;
- `load_time`: code that runs when the module is loaded: anything in the initialisation or
  finalisation tables (.init_array, .ctors, .fini_array, .dtors, .preinit_array) but nvcc's
  own registration function (`__sti____cudaRegisterAll`, which registers the fatbinary and
  the kernels and nothing else) and g++'s `<iostream>` initialiser (it sets up std::cout and
  registers its flush at exit, nothing else), an .init/.fini section, code outside .text, or an ifunc
  resolver (the dynamic loader runs it);
- `syscalls`: system-call instructions in host code (`syscall`, `sysenter`, `int $0x80`;
  `svc` on Arm), which reach the kernel without any library function.

Device code is not restricted here: it cannot call the host's libraries, and the SASS checks
read it. The sandbox (grader/check/sandbox.py) contains what no static check can rule out.
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .demangle import demangle, without_signature

# What a kernel launcher may take from libraries. Each entry is harmless on its own: it cannot
# reach a file, a process, the network or the environment, and it does no work the kernel
# should do (no copies, memsets, allocations, streams or graphs: those stay the kernel's job).
ALLOWED = [
    # nvcc's launch and registration plumbing (a <<<...>>> launch compiles to these)
    ("CUDA launch plumbing", r"__cuda(RegisterFatBinary|RegisterFatBinaryEnd|UnregisterFatBinary|RegisterFunction"
                             r"|RegisterVar|RegisterTexture|RegisterSurface|InitModule"
                             r"|PushCallConfiguration|PopCallConfiguration|LaunchKernel|LaunchKernel_ptsz|GetKernel)"),
    # launching, errors
    ("kernel launch", r"cuda(LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel)(_ptsz)?"),
    ("errors", r"cuda(GetLastError|PeekAtLastError|GetErrorString|GetErrorName)"),
    # a kernel's attributes and occupancy (dynamic shared memory above 48 KB, grid sizing)
    ("kernel attributes", r"cuda(FuncSetAttribute|FuncGetAttributes|FuncSetCacheConfig|Occupancy\w+)"),
    # which device, what it has; whether the stream is being captured into a graph
    ("device queries", r"cuda(GetDevice|GetDeviceCount|DeviceGetAttribute|GetDeviceProperties(_v2)?"
                       r"|DriverGetVersion|RuntimeGetVersion|PointerGetAttributes"
                       r"|StreamIsCapturing|StreamGetCaptureInfo(_v2|_v3)?)(_ptsz|_ptds)?"),
    # waiting (pointless in a launcher, and it only makes the call slower; common while debugging)
    ("synchronisation", r"cuda(DeviceSynchronize|StreamSynchronize)(_ptsz)?"),
    # the C++ runtime that compiled host code calls by itself
    ("C++ runtime", r"__cxa_guard_(acquire|release|abort)|__gxx_personality_v0|_Unwind_Resume|__cxa_pure_virtual"
                    r"|__stack_chk_fail|__stack_chk_guard|_GLOBAL_OFFSET_TABLE_"
                    r"|_Z(nw|na|dl|da)\w*|_ZSt\d+__throw_\w+"),   # operator new/delete, std::__throw_* helpers
    # nvcc's registration function unregisters the fatbinary at exit (only it may use atexit)
    ("exit-time unregistration", r"atexit"),
    ("memory primitives", r"(__)?(memcpy|memmove|memset)(_chk)?|memcmp|strlen|strnlen|strcmp|strncmp|memchr|strchr"),
    # a message formatted into a buffer or a std::string (for printing, say): memory only
    ("formatting into a buffer", r"(__)?v?snprintf(_chk)?"),
    ("C++ strings", r"_ZNK?St7__cxx1112basic_string\w+"),
    # a cache filled once under a lock or std::call_once, or per thread (thread_local): no thread started
    ("locks and once-only initialisation", r"pthread_mutex_(lock|unlock|trylock)|pthread_once|__once_proxy"
                                           r"|_ZSt11__once_call|_ZSt15__once_callable|__tls_get_addr"),
    # printing to the grading process's own stdout and stderr, which the grader captures (the log in
    # its scratch folder): no file, process or network (no FILE* but these two can be had: fopen,
    # fdopen, popen, tmpfile, stdin are refused); learners print grid sizes and errors while debugging
    ("printing to stdout or stderr", r"printf|__printf_chk|vprintf|__vprintf_chk|puts|putchar|fprintf|__fprintf_chk"
                                     r"|vfprintf|__vfprintf_chk|fputs|fputc|putc|fwrite|fflush|stdout|stderr"),
    # the same through C++ streams: std::cout, std::cerr, std::clog and std::ostream's members
    # (an ostream on a file needs std::filebuf, refused below); from g++ 13, <iostream> references
    # std::ios_base_library_init (an empty function of libstdc++: the streams are set up there, not here)
    ("printing to stdout or stderr (C++ streams)",
     r"_ZSt4(cout|cerr|clog)|_ZNSo\w+|_ZSt16__ostream_insertIcSt11char_traitsIcEE\w+|_ZStlsI\w*St11char_traitsIcE\w*"
     r"|_ZSt(4endl|4ends|5flush)IcSt11char_traitsIcEE\w+|_ZNKSt5ctypeIcE\w+"
     r"|_ZNSt9basic_iosIcSt11char_traitsIcEE5clearESt12_Ios_Iostate|_ZSt21ios_base_library_initv"),
    # a small table (a __constant__ array) uploaded from the host: it can hold only what the host
    # knows (the scalar arguments), never the inputs or the output; buffers stay the kernel's to write
    ("a table uploaded to a __constant__ variable", r"cudaMemcpyToSymbol(Async)?(_ptsz|_ptds)?"),
    # Hopper's TMA tensor maps, encoded by the course's binding (course/hopper.cuh's tensor_map_2d): it
    # fills a 128-byte descriptor from its arguments and reaches no other driver function
    ("a TMA tensor map", r"course_encode_tensor_map_tiled"),
    # a failed assert() or abort(): the process ends abnormally, which the grader reports as a crash
    ("assertions and abort", r"__assert_fail|__assert_perror_fail|abort"),
    ("math", r"(__)?(a?sin|a?cos|a?tan|atan2|sinh|cosh|tanh|asinh|acosh|atanh|sincos|exp|exp2|exp10|expm1|log|log2"
             r"|log10|log1p|logb|ilogb|pow|sqrt|cbrt|hypot|fabs|abs|labs|llabs|floor|ceil|round|lround|llround"
             r"|trunc|rint|lrint|llrint|nearbyint|fmod|remainder|remquo|fmin|fmax|fdim|fma|frexp|ldexp|scalbn"
             r"|modf|erf|erfc|tgamma|lgamma|copysign|nextafter|isnan|isinf|finite|fpclassify)[fl]?(_finite)?"),
]
_ALLOWED = [(kind, re.compile(rx + r"\Z")) for kind, rx in ALLOWED]

# What everything else is, for the message (first match); anything unlisted is "not needed".
LIBRARY_KINDS = [
    ("raw system call", r"syscall|__syscall\w*"),
    ("opens, reads or writes files",
     r"(f|fd|fre|__open|__open64)?open(at)?(64)?(_2)?|creat(64)?|read|pread(64)?|readv|preadv\w*|write|pwrite(64)?"
     r"|writev|pwritev\w*|close|f(read|write|gets|puts|printf|scanf|seek\w*|tell\w*|flush|getc|putc|close|eof"
     r"|error|ileno|open64)(_unlocked)?|v?fprintf|__fprintf_chk|__vfprintf_chk|(v)?dprintf|unlink(at)?|remove"
     r"|rename(at2?)?|mkdir(at)?|rmdir|(l|f)?stat(64|at|at64|x|fs|fs64|vfs)?|__(l|f)?xstat\w*|access|faccessat2?"
     r"|f?chmod(at)?|f?chown(at)?|lchown|f?truncate(64)?|opendir|fdopendir|readdir\w*|scandir\w*|closedir"
     r"|symlink(at)?|link(at)?|readlink(at)?|realpath|chdir|fchdir|chroot|getcwd|tmpfile(64)?|tmpnam|mkstemps?\w*"
     r"|mkdtemp|sendfile(64)?|splice|tee|copy_file_range|dup[23]?|fcntl(64)?|ioctl|flock|lockf|sync|fsync"
     r"|fdatasync|mknod(at)?|mkfifo(at)?|mount|umount2?|inotify_\w+|stdin|stdout|stderr|_IO_\w+|__uflow|__overflow"
     r"|\w*(fstream|filebuf|filesystem|ofstream|ifstream)\w*"),
    ("maps or protects memory", r"mmap(64)?|munmap|mremap|mprotect|madvise|brk|sbrk|shm_open|shmget|shmat"
                                r"|memfd_create|process_vm_\w+"),
    ("network", r"socket|socketpair|connect|bind|listen|accept4?|send(to|msg|mmsg)?|recv(from|msg|mmsg)?"
                r"|getaddrinfo|freeaddrinfo|gethostbyname\w*|gethostbyaddr\w*|getnameinfo|inet_\w+|setsockopt"
                r"|getsockopt|shutdown|getpeername|getsockname|poll|ppoll|select|pselect|epoll_\w+|curl_\w+"),
    ("starts or controls processes",
     r"fork|vfork|_Fork|__fork|clone3?|__clone\w*|execve|execveat|execv|execvp|execvpe|execl|execlp|execle"
     r"|fexecve|posix_spawn\w*|system|popen|pclose|wait|waitpid|wait3|wait4|waitid|kill|killpg|tgkill|ptrace"
     r"|setsid|setpgid|set(e|re|res)?[ug]id|prctl|unshare|setns|getpid|getppid|get(e)?[ug]id|daemon"),
    ("starts threads", r"pthread_\w+|thrd_\w+|_ZNSt6thread\w*|std::thread\w*"),
    ("reads or changes the environment", r"(secure_|__libc_secure_)?getenv|setenv|unsetenv|putenv|clearenv"
                                         r"|environ|__environ|_environ|getauxval|__libc_enable_secure"
                                         r"|program_invocation\w*|__progname\w*|confstr|sysconf|uname|gethostname"),
    ("loads code", r"dlopen|dlmopen|dlsym|dlvsym|dladdr\w*|dlinfo|dlerror|dlclose|__libc_dl\w+|_dl_\w+"
                   r"|dl_iterate_phdr"),
    ("ends the process or handles signals", r"exit|_exit|_Exit|abort|quick_exit|raise|signal|sigaction|sigprocmask"
                                            r"|sigqueue|alarm|setitimer|longjmp|_?setjmp|siglongjmp|__sigsetjmp"),
    ("registers code to run at exit", r"__cxa_atexit|__cxa_thread_atexit\w*|__dso_handle|at_quick_exit|on_exit"),
    ("throws or catches C++ exceptions", r"__cxa_(throw|rethrow|allocate_exception|free_exception|begin_catch"
                                         r"|end_catch|get_exception_ptr|current_exception_type)"),
    # memory both the host code and the kernel reach, kept between calls: nothing put back before a timed
    # call (check/device_state.py) can hold for it
    ("keeps memory the host can reach (a __managed__ variable)", r"__cudaRegisterManagedVar"),
    ("allocates or frees memory through the runtime",
     r"cuda(Malloc|Free|HostAlloc|HostRegister|HostUnregister|MallocHost|FreeHost|MallocAsync|FreeAsync"
     r"|MallocManaged|MallocPitch|Malloc3D|Malloc3DArray|MallocArray|MallocMipmappedArray|MallocFromPoolAsync"
     r"|MemPool\w+|DeviceSetMemPool|DeviceGetMemPool|DeviceGetDefaultMemPool|MemGetInfo|FreeArray"
     r"|FreeMipmappedArray)(_ptsz|_ptds)?|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|valloc"
     r"|memalign|pvalloc"),
    ("copies or sets memory through the runtime instead of a kernel",
     r"cuda(Memcpy|Memset|MemPrefetch|MemAdvise)\w*"),
    ("creates or controls streams, events, graphs or host callbacks",
     r"cuda(Stream|Event|Graph|UserObject|LaunchHostFunc|ThreadExchangeStreamCaptureMode)\w*"),
    ("changes the device's state", r"cuda(SetDevice|SetDeviceFlags|SetValidDevices|DeviceReset|DeviceSet\w+"
                                   r"|DeviceEnable\w+|DeviceDisable\w+|Ipc\w+|Ctx\w+|Profiler\w+|ThreadSet\w+"
                                   r"|ThreadExit|DeviceFlushGPUDirectRDMAWrites|InitDevice)\w*"),
    ("calls the CUDA driver directly", r"cu[A-Z]\w*|cudaGetDriverEntryPoint\w*|cudaGetExportTable"
                                       r"|cudaGetFuncBySymbol|cudaLibrary\w+|cudaKernel\w+|__cudaGetExportTableInternal"),
    ("calls a CUDA library instead of computing", r"(cublas|cublasLt|cudnn|cufft|curand|cusparse|cusolver|nccl|nvrtc"
                                                  r"|nvJitLink|nvjpeg|npp|cutensor|nvshmem)\w*"),
    ("calls PyTorch or Python", r"_ZN(K)?(2at|5torch|3c10|8pybind11)\w*|_Py\w+|Py[A-Z]\w*"),
]
_KINDS = [(kind, re.compile(rx + r"\Z")) for kind, rx in LIBRARY_KINDS]
NOT_NEEDED = "not a function a kernel launcher needs"

# What to do instead, by kind (the refusal says it)
REMEDIES = {
    "ends the process or handles signals": "return a cudaError_t (e.g. cudaErrorInvalidValue) instead of exiting",
    "allocates or frees memory through the runtime": "use the buffers you are given (a workspace, if the entry point "
                                                     "has one), registers or shared memory",
    "copies or sets memory through the runtime instead of a kernel": "write (or zero) the buffer in your kernel; only "
                                                                     "a __constant__ table may be uploaded "
                                                                     "(cudaMemcpyToSymbolAsync)",
    "creates or controls streams, events, graphs or host callbacks": "launch on the cudaStream_t you are given",
    "keeps memory the host can reach (a __managed__ variable)": "use the buffers you are given; a table the kernel "
                                                                "needs can be a __device__ or __constant__ variable",
    "opens, reads or writes files": "remove it (printing to stdout or stderr is fine)",
    "throws or catches C++ exceptions": "return a cudaError_t instead",
    "calls a CUDA library instead of computing": "compute it in your kernel",
}

# Symbols allowed only in code the compilers write themselves, recognised by its shape in the
# object; everywhere else (a learner's own exit() or atexit()) their refusal stands.
#   device stub: nvcc gives every non-inline `__device__` function a host stub whose body is
#     `int volatile ___ = 1; ::exit(___);` (host code cannot call a __device__ function: nvcc refuses)
#   iostream init: g++ (up to 12) gives a file that includes <iostream> a `static std::ios_base::Init`,
#     constructed at load (it sets up std::cout and friends) and destroyed at exit (a flush)
#   static local: a function's `static` object with a destructor (a cached std::vector of SM counts) is
#     constructed on the first call, under __cxa_guard_acquire/release, and its destructor registered
#     with __cxa_atexit; what runs at exit is the file's own code, which these checks read like the rest
COMPILER_WRITTEN = {
    "exit": ("device stub",),
    "_ZNSt8ios_base4InitC1Ev": ("iostream init",), "_ZNSt8ios_base4InitD1Ev": ("iostream init",),
    "__cxa_atexit": ("iostream init", "static local"), "__dso_handle": ("iostream init", "static local"),
}
IOINIT_OBJECT = "_ZStL8__ioinit"

# nvcc's registration function, the one entry its objects put in .init_array
REGISTRATION = re.compile(r"(_ZL24)?__sti____cudaRegisterAll(v|\(\))?\Z")
# what it may call: registration, and atexit for the unregistration
REGISTRATION_CALLS = re.compile(r"(__cuda(Register\w+|UnregisterFatBinary|InitModule)|atexit|_GLOBAL_OFFSET_TABLE_)\Z")
LOAD_TIME_SECTIONS = re.compile(r"\.(init_array|fini_array|preinit_array|ctors|dtors)(\.\d+)?\Z")
SYSCALL_MNEMONICS = {"syscall", "sysenter", "svc", "hvc", "smc"}

SHT_SYMTAB, SHT_RELA, SHT_REL, SHT_SYMTAB_SHNDX = 2, 4, 9, 18
SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY = 14, 15, 16
SHF_EXECINSTR = 0x4
STT_FUNC, STT_SECTION, STT_GNU_IFUNC = 2, 3, 10
EM_X86_64 = 62


class LinkCheckError(RuntimeError):
    """The object could not be read (not ELF64, a missing tool): the check cannot vouch for it."""


@dataclass
class Symbol:
    name: str
    type: int
    bind: int
    shndx: int
    value: int
    size: int


@dataclass
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass
class Relocation:
    section: int      # the section the relocation patches
    offset: int
    symbol: Symbol
    addend: int


@dataclass
class Object:
    """The parts of an ELF64 relocatable object the checks read."""
    path: str
    machine: int
    sections: list[Section]
    symbols: list[Symbol]
    relocations: list[Relocation]
    data: bytes = field(repr=False, default=b"")

    @property
    def undefined(self) -> list[str]:
        return sorted({s.name for s in self.symbols[1:] if s.shndx == 0 and s.name})

    def function_at(self, section: int, offset: int) -> Symbol | None:
        for s in self.symbols:
            if s.type in (STT_FUNC, STT_GNU_IFUNC) and s.shndx == section and s.value <= offset < s.value + max(s.size, 1):
                return s
        return None

    def target(self, rel: Relocation) -> Symbol | None:
        """The function a pointer-sized relocation points at (a section symbol plus an offset, or a symbol)."""
        if rel.symbol.type == STT_SECTION:
            return self.function_at(rel.symbol.shndx, rel.addend)
        return rel.symbol


def read_object(path: str | Path, relocations: bool = True) -> Object:
    """Parse an ELF64 object: sections, symbols and (unless `relocations` is False) relocations."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise LinkCheckError(f"{path} is not an ELF64 object file")
    end = "<" if data[5] == 1 else ">"
    (_, _, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx) = struct.unpack_from(
        end + "16sHHIQQQIHHHHHH", data, 0)

    def header(i):
        return struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize)

    if shnum == 0:  # extended numbering: the count is in section 0
        shnum = header(0)[5]
    if shstrndx == 0xFFFF:
        shstrndx = header(0)[6]
    raw = [header(i) for i in range(shnum)]
    strtab = raw[shstrndx]

    def string(table_offset, index):
        start = table_offset + index
        return data[start:data.index(b"\0", start)].decode("utf-8", "replace")

    sections = [Section(i, string(strtab[4], h[0]), h[1], h[2], h[4], h[5], h[6], h[7], h[9])
                for i, h in enumerate(raw)]
    symbols: list[Symbol] = []
    symtab = next((s for s in sections if s.type == SHT_SYMTAB), None)
    if symtab is not None:
        names = sections[symtab.link]
        xindex = next((s for s in sections if s.type == SHT_SYMTAB_SHNDX and s.link == symtab.index), None)
        for i in range(symtab.size // 24):
            st_name, info, _, shndx, value, size = struct.unpack_from(end + "IBBHQQ", data, symtab.offset + 24 * i)
            if shndx == 0xFFFF and xindex is not None:
                shndx = struct.unpack_from(end + "I", data, xindex.offset + 4 * i)[0]
            name = string(names.offset, st_name)
            if info & 0xF == STT_SECTION and not name:
                name = sections[shndx].name if shndx < len(sections) else ""
            symbols.append(Symbol(name, info & 0xF, info >> 4, shndx, value, size))
    relocs = []
    for s in sections if relocations else ():
        if s.type not in (SHT_RELA, SHT_REL) or not symbols:
            continue
        size = 24 if s.type == SHT_RELA else 16
        for i in range(s.size // size):
            if s.type == SHT_RELA:
                offset, info, addend = struct.unpack_from(end + "QQq", data, s.offset + size * i)
            else:  # the addend sits in the patched bytes
                offset, info = struct.unpack_from(end + "QQ", data, s.offset + size * i)
                target = sections[s.info]
                addend = struct.unpack_from(end + "q", data, target.offset + offset)[0] if target.size >= offset + 8 else 0
            relocs.append(Relocation(s.info, offset, symbols[info >> 32], addend))
    return Object(str(path), machine, sections, symbols, relocs, data)


def _demangle(names: list[str]) -> dict[str, str]:
    return demangle(names) if names else {}


def kind_of(symbol: str) -> str | None:
    """None when `symbol` is on the allow-list, else what it is ("opens, reads or writes files", ...)."""
    base = symbol.split("@")[0]
    if any(rx.match(base) for _, rx in _ALLOWED):
        return None
    return next((kind for kind, rx in _KINDS if rx.match(base)), NOT_NEEDED)


@dataclass
class Finding:
    what: str     # the symbol or function, readable
    why: str      # what it is or does


@dataclass
class LinkReport:
    path: str
    undefined: list[str]
    calls: list[Finding]       # library functions not allowed
    load_time: list[Finding]   # code run when the module is loaded (or unloaded)
    syscalls: list[Finding]    # system-call instructions

    @property
    def ok(self) -> bool:
        return not (self.calls or self.load_time or self.syscalls)


def _load_time(obj: Object, names: dict[str, str], code: dict[str, list[str]]) -> list[Finding]:
    found = []
    registration: list[Symbol] = []
    for s in obj.sections:
        if not s.name and s.type == 0:
            continue
        table = s.type in (SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY) or LOAD_TIME_SECTIONS.match(s.name)
        if table and s.size:
            rels = [r for r in obj.relocations if r.section == s.index]
            entries = s.size // 8
            for r in rels:
                fn = obj.target(r)
                fname = fn.name if fn else f"{r.symbol.name}+{r.addend:#x}"
                if s.name.startswith(".init_array") and s.type != SHT_PREINIT_ARRAY and fn is not None \
                        and REGISTRATION.match(fn.name) and fn.shndx != 0 and not registration:
                    registration.append(fn)
                    continue
                when = "at unload" if re.search(r"fini|dtors", s.name) or s.type == SHT_FINI_ARRAY else "at load"
                if s.name.startswith(".init_array") and fn is not None and _is_iostream_init(obj, fn, code):
                    continue  # g++'s <iostream> initialiser
                if fname.startswith("_GLOBAL__sub_I"):  # what g++ names the dynamic initialisation of globals
                    found.append(Finding("a global object's constructor", f"runs {when}, from {s.name}"))
                else:
                    found.append(Finding(_short(names.get(fname, fname)), f"runs {when}, from {s.name}"))
            if len(rels) < entries:
                found.append(Finding(s.name, f"{entries - len(rels)} entries of {s.name} point at fixed addresses"))
        elif s.name in (".init", ".fini"):
            found.append(Finding(s.name, f"code in the {s.name} section"))
        elif s.flags & SHF_EXECINSTR and not (s.name == ".text" or s.name.startswith(".text.")):
            found.append(Finding(s.name, "code outside .text"))
    for sym in obj.symbols:
        if sym.type == STT_GNU_IFUNC:
            found.append(Finding(names.get(sym.name, sym.name), "an ifunc whose resolver the loader runs"))
    for fn in registration:  # nvcc's function may only register: anything else in it is not nvcc's
        for r in obj.relocations:
            if r.section == fn.shndx and fn.value <= r.offset < fn.value + fn.size and r.symbol.shndx == 0 \
                    and not REGISTRATION_CALLS.match(r.symbol.name):
                found.append(Finding(names.get(r.symbol.name, r.symbol.name),
                                     "called from the registration function that runs at load"))
    # atexit: only nvcc's registration function uses it (to unregister the fatbinary)
    for r in obj.relocations:
        if r.symbol.name == "atexit" and r.symbol.shndx == 0:
            fn = obj.function_at(r.section, r.offset)
            if fn is None or fn not in registration:
                who = names.get(fn.name, fn.name) if fn else obj.sections[r.section].name
                found.append(Finding(f"atexit in {who}", "registers code to run at exit"))
    return found


def _disassembly(path: str) -> dict[str, list[str]]:
    """Each function's instructions (objdump, AT&T syntax), by its symbol name as in the object."""
    objdump = shutil.which("objdump")
    if not objdump:
        raise LinkCheckError("objdump was not found: the link checks need GNU binutils (apt-get install binutils)")
    proc = subprocess.run([objdump, "-d", "-w", "--no-show-raw-insn", path], capture_output=True, text=True,
                          errors="replace")
    if proc.returncode != 0:
        raise LinkCheckError(f"objdump could not read {path}: {proc.stderr.strip()[:300]}")
    code: dict[str, list[str]] = {}
    function = "?"
    for line in proc.stdout.splitlines():
        m = re.match(r"[0-9a-f]+ <(.*)>:\s*$", line)
        if m:
            function = m.group(1)
            code.setdefault(function, [])
            continue
        m = re.match(r"\s+[0-9a-f]+:\s+(.*)$", line)
        if m:
            code.setdefault(function, []).append(m.group(1))
    return code


def _syscalls(code: dict[str, list[str]], names: dict[str, str]) -> list[Finding]:
    found = []
    for function, lines in code.items():
        for line in lines:
            # the instruction's words (prefixes included), without symbol names and comments
            words = set(re.split(r"[\s,]+", re.sub(r"<[^>]*>|#.*", "", line).strip()))
            hit = words & SYSCALL_MNEMONICS or ({"int", "$0x80"} <= words and {"int $0x80"})
            if hit:
                found.append(Finding(f"{min(hit)} in {_short(_readable(function, names))}", "raw system call instruction"))
    return found


def _readable(label: str, names: dict[str, str]) -> str:
    """A function's name as objdump labels it ('_Z1kPf.cold'), demangled."""
    base, dot, clone = label.partition(".")
    return names.get(label) or (names.get(base, base) + (f" [clone .{clone}]" if dot else ""))


def _instructions(code: dict[str, list[str]], fn: Symbol) -> list[str]:
    """fn's instructions without padding (nop, endbr64), comments and symbol annotations."""
    out = []
    for line in code.get(fn.name, []):
        ins = " ".join(re.sub(r"<[^>]*>|#.*", "", line).split())
        if ins and not re.match(r"(endbr64|nop\w*|data16|cs nop\w*|xchg %ax,%ax)\b", ins):
            out.append(ins)
    return out


def _relocations_in(obj: Object, fn: Symbol) -> list[Relocation]:
    return [r for r in obj.relocations if r.section == fn.shndx and fn.value <= r.offset < fn.value + max(fn.size, 1)]


_STACK = r"(?:-?0x[0-9a-f]+)?\(%[re](?:sp|bp)\)"
_STUB_INSTRUCTION = re.compile(
    rf"push %[re](?:bp|ax|bx)|pop %[re](?:bp|ax|bx)|mov %rsp,%rbp|(?:sub|add) \$0x[0-9a-f]+,%rsp|leave"
    rf"|mov[a-z]* %[a-z0-9]+,{_STACK}|movl \$0x1,{_STACK}|mov {_STACK},%(?:edi|eax)|mov %eax,%edi|call \S+")


def _is_device_stub(obj: Object, fn: Symbol, code: dict[str, list[str]]) -> bool:
    """nvcc's host stub of a `__device__` function (x86-64): `int volatile ___ = 1; ::exit(___);`,
    the function's parameters at most stored to its own stack. Its one relocation is the call of
    exit, which is its last instruction, and exit's argument is the 1 it stored."""
    rels = _relocations_in(obj, fn)
    if obj.machine != EM_X86_64 or len(rels) != 1 or rels[0].symbol.name != "exit":
        return False
    ins = _instructions(code, fn)
    ones = [m.group(1) for i in ins if (m := re.fullmatch(rf"movl \$0x1,({_STACK})", i))]
    if len(ones) != 1 or not ins or not ins[-1].startswith("call"):
        return False
    loaded = f"mov {ones[0]},%edi" in ins or (f"mov {ones[0]},%eax" in ins and "mov %eax,%edi" in ins)
    return loaded and sum(i.startswith("call") for i in ins) == 1 and all(_STUB_INSTRUCTION.fullmatch(i) for i in ins) \
        and not _referenced(obj, fn, code)


def _referenced(obj: Object, fn: Symbol, code: dict[str, list[str]]) -> bool:
    """Whether anything in the object calls `fn` or takes its address: a relocation to it, or an
    instruction of another function that names it (a call the assembler resolved itself)."""
    unwind = re.compile(r"\.(eh_frame|debug\w*|gcc_except_table)\b")  # where every function is described
    if any(obj.target(r) == fn for r in obj.relocations
           if (r.symbol is fn or r.symbol.type == STT_SECTION) and not unwind.match(obj.sections[r.section].name)):
        return True
    mention = re.compile(rf"<{re.escape(fn.name)}(\+0x[0-9a-f]+)?>")
    return any(mention.search(line) for other, lines in code.items() if other != fn.name for line in lines)


def _is_iostream_init(obj: Object, fn: Symbol, code: dict[str, list[str]]) -> bool:
    """g++'s initialiser for `static std::ios_base::Init __ioinit` (<iostream>): it constructs that
    object and registers its destructor with __cxa_atexit, and references nothing else."""
    if not fn.name.startswith("_GLOBAL__sub_I") or fn.shndx == 0:
        return False
    ioinit = [o for o in obj.symbols if o.name == IOINIT_OBJECT and 0 < o.shndx < 0xFF00]
    allowed = {k for k, v in COMPILER_WRITTEN.items() if "iostream init" in v}
    seen = set()
    for r in _relocations_in(obj, fn):
        sym = r.symbol
        if sym.name in allowed and sym.shndx == 0:
            seen.add(sym.name)
        elif any(sym is o or (sym.type == STT_SECTION and sym.shndx == o.shndx
                              and any(o.value <= r.addend + d < o.value + max(o.size, 1) for d in (0, 4)))
                 for o in ioinit):
            seen.add(IOINIT_OBJECT)
        else:
            return False
    return "_ZNSt8ios_base4InitC1Ev" in seen and len(_instructions(code, fn)) <= 16


def _is_static_local_init(obj: Object, fn: Symbol, code: dict[str, list[str]]) -> bool:
    """A function that constructs a `static` local under its guard (it calls __cxa_guard_acquire and
    __cxa_guard_release), where g++ registers the object's destructor."""
    called = {r.symbol.name for r in _relocations_in(obj, fn) if r.symbol.shndx == 0}
    return {"__cxa_guard_acquire", "__cxa_guard_release"} <= called


def _compiler_written(obj: Object, code: dict[str, list[str]]) -> set[str]:
    """The COMPILER_WRITTEN symbols every reference to which lies in a function of a shape that
    allows it (none from data, none from other code)."""
    shapes = {"device stub": _is_device_stub, "iostream init": _is_iostream_init, "static local": _is_static_local_init}
    ok = set()
    for name, allowed in COMPILER_WRITTEN.items():
        refs = [r for r in obj.relocations if r.symbol.name == name and r.symbol.shndx == 0]
        fns = [obj.function_at(r.section, r.offset) if obj.sections[r.section].flags & SHF_EXECINSTR else None
               for r in refs]
        if refs and all(fn is not None and any(shapes[shape](obj, fn, code) for shape in allowed) for fn in fns):
            ok.add(name)
    return ok


def inspect(path: str | Path) -> LinkReport:
    """Read a host object file: what it links to, what runs at load time, raw system calls."""
    obj = read_object(path)
    undefined = obj.undefined
    funcs = [s.name for s in obj.symbols if s.type in (STT_FUNC, STT_GNU_IFUNC) and s.name]
    code = _disassembly(str(path))
    names = _demangle(sorted(set(undefined + funcs)))
    excused = _compiler_written(obj, code)
    calls = [Finding(_short(names.get(u, u)), kind) for u in undefined if u not in excused and (kind := kind_of(u))]
    return LinkReport(str(path), undefined, calls, _load_time(obj, names, code), _syscalls(code, names))


def _short(name: str) -> str:
    """A readable name: no parameter list, template arguments folded ('std::basic_string<...>::_M_append')."""
    name = without_signature(name)
    while True:
        folded = re.sub(r"<[^<>]*>", "\0", name)
        if folded == name:
            return name.replace("\0", "<...>")
        name = folded


def summary(findings: list[Finding], limit: int = 5) -> str:
    """'getenv (reads the environment); fopen, fputs (opens, reads or writes files)': grouped by
    kind, the worst kinds first, at most `limit` names each."""
    rank = {kind: i for i, (kind, _) in enumerate(LIBRARY_KINDS)}
    by_kind: dict[str, list[str]] = {}
    for f in findings:
        by_kind.setdefault(f.why, []).append(f.what)
    parts = []
    for why in sorted(by_kind, key=lambda k: rank.get(k, len(rank))):
        whats = sorted(set(by_kind[why]))
        more = f" and {len(whats) - limit} more" if len(whats) > limit else ""
        parts.append(f"{', '.join(whats[:limit])}{more} ({why})")
    return "; ".join(parts)
