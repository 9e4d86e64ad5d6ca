// The launch decisions of executor/launch.hpp on environments given as maps: which
// variables name a rank, which launcher auto picks, and the command lines built.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/launch.hpp"

using namespace tessel;
using namespace tessel::executor;

TEST(ExecutorLaunch, EveryLauncherFamilyNamesRankWorldAndLocalRank) {
  struct Case {
    Environment environment;
    int rank, world, local;
    const char* source;
  };
  const Case cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}, 3, 8, 1,
       "OMPI_COMM_WORLD_RANK"},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}}, 5, 6, 2, "PMI_RANK"},
      {{{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}}, 9, 16, 1,
       "SLURM_PROCID"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, 0, 2, 0, "RANK"},
  };
  for (const Case& c : cases) {
    const LaunchedRank launched = read_launched_rank(c.environment);
    ASSERT_TRUE(launched.inside_launcher()) << c.source;
    EXPECT_EQ(*launched.rank, c.rank) << c.source;
    EXPECT_EQ(*launched.world_size, c.world) << c.source;
    ASSERT_TRUE(launched.local_rank.has_value()) << c.source;
    EXPECT_EQ(*launched.local_rank, c.local) << c.source;
    EXPECT_EQ(launched.source, c.source);
  }
}

TEST(ExecutorLaunch, MpirunInsideASlurmJobReadsMpirunsNumbering) {
  const Environment environment{{"SLURM_JOB_ID", "77"},         {"SLURM_PROCID", "0"},  {"SLURM_STEP_ID", "0"},
                                {"SLURM_NTASKS", "1"},          {"SLURM_LOCALID", "0"},
                                {"OMPI_COMM_WORLD_RANK", "6"},  {"OMPI_COMM_WORLD_SIZE", "8"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}};
  const LaunchedRank launched = read_launched_rank(environment);
  EXPECT_EQ(*launched.rank, 6);
  EXPECT_EQ(*launched.world_size, 8);
  EXPECT_EQ(*launched.local_rank, 2);
}

TEST(ExecutorLaunch, ALocalRankAloneIsNotALauncherAndBadValuesAreNamed) {
  const LaunchedRank local_only = read_launched_rank({{"LOCAL_RANK", "3"}, {"RANK", "1"}});
  EXPECT_FALSE(local_only.inside_launcher());
  EXPECT_EQ(*local_only.local_rank, 3);
  EXPECT_FALSE(read_launched_rank({}).inside_launcher());
  try {
    read_launched_rank({{"PMI_RANK", "x1"}, {"PMI_SIZE", "2"}});
    FAIL() << "a rank that is not a number was accepted";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "environment: PMI_RANK=x1: must be a non-negative integer");
  }
  EXPECT_THROW(read_launched_rank({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), Error);
  EXPECT_THROW(read_launched_rank({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), Error);
}

TEST(ExecutorLaunch, AutoBecomesTheWorkerInsideALauncherThenSrunThenMpirun) {
  EXPECT_EQ(resolve_launcher(Launcher::automatic, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
            Launcher::none);
  EXPECT_EQ(resolve_launcher(Launcher::automatic, {{"SLURM_JOB_ID", "12"}}), Launcher::srun);
  // A batch script has a rank and a task count but no step: tessel run launches srun.
  EXPECT_EQ(resolve_launcher(Launcher::automatic,
                             {{"SLURM_JOB_ID", "12"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}}),
            Launcher::srun);
  EXPECT_EQ(resolve_launcher(Launcher::automatic, {{"HOME", "/root"}}), Launcher::mpirun);
  // Asked for by name: kept, whatever the environment says.
  EXPECT_EQ(resolve_launcher(Launcher::mpirun, {{"SLURM_JOB_ID", "12"}}), Launcher::mpirun);
  EXPECT_EQ(parse_launcher("srun"), Launcher::srun);
  EXPECT_EQ(parse_launcher("auto"), Launcher::automatic);
  try {
    parse_launcher("ssh");
    FAIL();
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "--launcher: must be auto, mpirun, srun or none, got ssh");
  }
}

TEST(ExecutorLaunch, CommandLinesForOneMachineManyNodesAndSlurm) {
  LaunchRequest request;
  request.world_size = 4;
  request.ranks_per_node = 4;
  request.worker = "/bin/tessel-rank";
  request.worker_arguments = {"--plan", "p.json"};
  using Argv = std::vector<std::string>;
  EXPECT_EQ(launch_command(Launcher::mpirun, request),
            (Argv{"mpirun", "--allow-run-as-root", "-np", "4", "--oversubscribe", "/bin/tessel-rank", "--plan", "p.json"}));
  request.hostfile = "hosts";
  EXPECT_EQ(launch_command(Launcher::mpirun, request),
            (Argv{"mpirun", "--allow-run-as-root", "-np", "4", "-hostfile", "hosts", "/bin/tessel-rank", "--plan",
                  "p.json"}));
  // A GPU cluster of 2 nodes x 8 GPUs: one rank per device on each node.
  request.world_size = 16;
  request.ranks_per_node = 8;
  EXPECT_EQ(launch_command(Launcher::mpirun, request),
            (Argv{"mpirun", "--allow-run-as-root", "-np", "16", "-hostfile", "hosts", "--map-by", "ppr:8:node",
                  "/bin/tessel-rank", "--plan", "p.json"}));
  EXPECT_THROW(launch_command(Launcher::srun, request), Error);  // srun takes no hostfile
  request.hostfile.clear();
  EXPECT_EQ(launch_command(Launcher::srun, request),
            (Argv{"srun", "--ntasks=16", "--ntasks-per-node=8", "--kill-on-bad-exit=1", "/bin/tessel-rank", "--plan",
                  "p.json"}));
  EXPECT_THROW(launch_command(Launcher::none, request), Error);
  EXPECT_THROW(launch_command(Launcher::automatic, request), Error);
}
