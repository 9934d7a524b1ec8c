// Work-item indices from clang builtins: no ROCm device libraries are linked.
#pragma once
#define LID() __builtin_amdgcn_workitem_id_x()
#define GRP() __builtin_amdgcn_workgroup_id_x()
#define LSZ() __builtin_amdgcn_workgroup_size_x()
#define GID() (GRP() * LSZ() + LID())
#define LID_Y() __builtin_amdgcn_workitem_id_y()
#define GRP_Y() __builtin_amdgcn_workgroup_id_y()
#define LSZ_Y() __builtin_amdgcn_workgroup_size_y()
#define GID_Y() (GRP_Y() * LSZ_Y() + LID_Y())
// barrier(CLK_LOCAL_MEM_FENCE) without the OpenCL library.
#define LDS_BARRIER() do { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); \
                           __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); } while (0)
