// Every page module, in the order their URL keys appear in a link. The shell picks the
// first page whose `tool` is the URL's tool and that `accepts` the run (two pages share
// the memory_profile tool: allocator/trace memory, and PyTorch snapshots).
import overview from "./overview.js";
import memoryViewer from "./memory_viewer.js";
import memoryProfile from "./memory_profile.js";
import torchSnapshot from "./torch_snapshot.js";
import traceViewer from "./trace_viewer.js";
import oomRisk from "./oom_risk.js";

export const PAGES = [overview, memoryViewer, memoryProfile, traceViewer, oomRisk, torchSnapshot];
