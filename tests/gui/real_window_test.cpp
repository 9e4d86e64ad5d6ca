// The real window on a real display: `tessel gui --screenshot` under Xvfb with Qt's xcb
// platform shows the window, waits until the X server exposes it and reads it back from
// the screen (not from the widgets), so a window that never reached the display would
// come back blank. Skipped, with the reason, where xvfb-run is not installed
// (scripts/packages.txt installs it, so CI runs it).
#include <gtest/gtest.h>

#include <QDir>
#include <QImage>
#include <QTemporaryDir>
#include <cstdlib>
#include <set>

#include "../tessel_binary.hpp"
#include "tessel/core/subprocess.hpp"

TEST(RealWindow, UnderXvfbTheScreenShowsThePlots) {
  int status = -1;
  tessel::run_command("command -v xvfb-run > /dev/null 2>&1", status);
  if (status != 0) GTEST_SKIP() << "xvfb-run is not installed (Debian package xvfb); the real-window test needs it";
  QTemporaryDir dir;
  const std::string png = dir.filePath("window.png").toStdString();
  const std::string out = tessel::run_command(
      "QT_QPA_PLATFORM=xcb xvfb-run -a -s '-screen 0 1600x1000x24' " + std::string(TESSEL_BINARY) +
          " gui --model gpt2-350m --cluster dgx-h100 --global-batch 64 --screenshot '" + png + "' --tab plans 2>&1",
      status);
  ASSERT_EQ(status, 0) << out;
  // The window came from the X server, not the offscreen renderer.
  EXPECT_NE(out.find("(tab plans, xcb)"), std::string::npos) << out;
  const QImage image(QString::fromStdString(png));
  ASSERT_FALSE(image.isNull());
  EXPECT_GE(image.width(), 800);
  // The scatter's area (top of the tabs, right of the inputs): many distinct colours.
  std::set<QRgb> colours;
  for (int y = image.height() / 10; y < image.height() / 3; y += 2)
    for (int x = image.width() / 4; x < image.width(); x += 2) colours.insert(image.pixel(x, y));
  EXPECT_GT(colours.size(), 50u) << "a blank or flat window: " << colours.size() << " colours";
}
