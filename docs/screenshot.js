const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox','--disable-gpu','--disable-quic','--no-first-run','--disable-background-networking','--disable-component-update','--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1500, height: 850 } });
  await page.goto(process.argv[2], { waitUntil: 'networkidle' });
  await page.waitForTimeout(8000);
  const skip = page.getByRole('button', { name: 'Skip' });
  if (await skip.count()) { await skip.click(); await page.waitForTimeout(1500); }
  await page.screenshot({ path: process.argv[3] });
  await browser.close();
})();
